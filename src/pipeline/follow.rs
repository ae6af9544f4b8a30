//! A follow or an unfollow, carried out.

use super::hold::{Failure, Hold};
use super::processed::Processed;
use super::sources::FollowGreeting;
use super::work::Work;
use super::worker::EventWorker;
use crate::engine::FollowPlan;

impl EventWorker {
    /// A follow or an unfollow: recorded on the user first (idempotent, by event
    /// time); an unfollow then cancels the user's pending timers (a timer that
    /// fires before its cancel lands reads `following` and sends nothing); a
    /// follow then settles the friend-add sources waiting for it (and waits for
    /// a login, `SOURCE_WAIT_SECS`, by coming back later), caches the user's
    /// display name (LINE's profile) and starts a source's scenario or the
    /// follow trigger's, if any.
    pub(super) async fn follow(&self, hold: &Hold, work: &Work, plan: &FollowPlan) -> Result<Processed, Failure> {
        let newest = self
            .store
            .record_following(plan.user.as_str(), plan.following, work.event_time_ms)
            .await?;
        // Only the newest unfollow cancels, and only what was scheduled before
        // it: a late one must not stop the steps of a follow that came after.
        if !plan.following && newest {
            let cancelled = self
                .store
                .cancel_user_timers(plan.user.as_str(), work.event_time_ms, "unfollowed")
                .await?;
            tracing::info!(timers.cancelled = cancelled, "the user unfollowed");
        }
        // Friend-add sources: a login recorded before this follow, or one
        // within its wait, has its scenario greet instead of the welcome.
        let mut greeting = FollowGreeting::Welcome;
        if plan.following && newest {
            greeting = self
                .sources
                .followed(&plan.user, &work.webhook_event_id, work.event_time_ms)
                .await?;
            if let FollowGreeting::Wait(wait) = greeting {
                return Err(Failure::Deferred(wait));
            }
        } else if plan.following {
            self.sources
                .superseded(&plan.user, &work.webhook_event_id, work.event_time_ms)
                .await?;
        } else if newest {
            self.sources.unfollowed(&plan.user, work.event_time_ms).await?;
        }
        // A friend's display name is fetched now, so the greeting can use it.
        if plan.following && newest {
            self.personal.refresh(&plan.user).await;
        }
        match (&greeting, &plan.start) {
            (FollowGreeting::Source(source), welcome) => self.greet(hold, work, source, welcome.as_ref()).await,
            // A follow no longer the newest greets no one: an unfollow came
            // after it, or a newer follow greets.
            (_, Some(start)) if newest || !plan.following => self.start(hold, work, start).await,
            _ => {
                self.done_without_effect(hold)?;
                Ok(if plan.following {
                    Processed::Followed
                } else {
                    Processed::Unfollowed
                })
            }
        }
    }
}
