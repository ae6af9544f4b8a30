//! A campaign's test send (テスト配信): its first messages pushed now to up to
//! ten operators' own accounts, marked as a test, before the real one. No
//! campaign, no run, no chunk; nothing is counted. Each push carries a retry
//! key from the `Idempotency-Key` (when given) and the user, so a retried call
//! sends nothing twice.

use super::{CampaignError, CampaignRequest, Campaigns};
use crate::engine::campaign::Delivery;
use crate::ids::LineUserId;
use crate::line::client::Delivered;
use crate::line::messages::{MAX_MESSAGES_PER_REQUEST, Message};
use crate::outbound::ActionKey;

/// Users a test send may go to.
pub(crate) const MAX_TEST_RECIPIENTS: usize = 10;

/// What a test message starts with, so nobody takes it for the real one.
pub(crate) const TEST_NOTICE: &str = "【テスト配信】これはテスト送信です。";

/// What became of one test push.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TestResult {
    pub(crate) user_id: String,
    /// `sent`, `already_sent` (a retried call's), `logged` (a dry run),
    /// `failed` or `unknown` (no answer from LINE: it may have arrived).
    pub(crate) result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl Campaigns {
    /// Pushes the campaign's first messages, marked as a test, to `users`.
    pub(crate) async fn test_send(
        &self,
        key: Option<&str>,
        request: &CampaignRequest,
        users: &[LineUserId],
    ) -> Result<Vec<TestResult>, CampaignError> {
        // A run of its own, marked as a test's: taps on its buttons are
        // ignored (the engine records nothing for them).
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let run = crate::ids::RunId::of_test_send(&nonce);
        let engine = self.engine();
        let start = engine.campaign_start_in(&request.scenario_id, &run)?;
        let mut results = Vec::with_capacity(users.len());
        for user in users {
            // A push campaign's start is each user's own: decided for them
            // (read only: nothing of it is recorded).
            let messages = match start.delivery {
                Delivery::Multicast => marked(start.messages.clone()),
                Delivery::Push => match super::push::decide_start(self, engine, &request.scenario_id, &run, user).await
                {
                    Ok((_, messages)) => marked(messages),
                    Err(error) => {
                        results.push(TestResult {
                            user_id: user.to_string(),
                            result: "failed",
                            error: Some(error.to_string()),
                        });
                        continue;
                    }
                },
            };
            let retry_key = match key {
                Some(key) => ActionKey::manual(&format!("campaign-test\u{1}{key}"), &request.scenario_id, user)
                    .ok_or(CampaignError::BadKey)?
                    .retry_key(),
                None => uuid::Uuid::new_v4(),
            };
            let (result, error) = match self.inner.line.push(user.as_str(), &messages, retry_key).await {
                Ok(Delivered::Sent) => ("sent", None),
                Ok(Delivered::AlreadyAccepted) => ("already_sent", None),
                Ok(Delivered::Logged) => ("logged", None),
                Err(error) if error.certainly_not_sent() => ("failed", Some(error.to_string())),
                Err(error) => ("unknown", Some(error.to_string())),
            };
            tracing::info!(
                scenario.id = %request.scenario_id,
                user.id = %crate::log_ids::logged(user.as_str()),
                outcome = result,
                "campaign test send"
            );
            results.push(TestResult {
                user_id: user.to_string(),
                result,
                error,
            });
        }
        Ok(results)
    }
}

fn text(text: impl Into<String>) -> Message {
    Message::Text {
        text: text.into(),
        quick_reply: None,
    }
}

/// `messages` marked as a test: the notice first, or, with no room left for
/// a sixth message, at the head of the first text.
fn marked(mut messages: Vec<Message>) -> Vec<Message> {
    if messages.len() < MAX_MESSAGES_PER_REQUEST {
        messages.insert(0, text(TEST_NOTICE));
    } else if let Some(Message::Text { text: first, .. }) = messages
        .iter_mut()
        .find(|message| matches!(message, Message::Text { .. }))
    {
        *first = format!("{TEST_NOTICE}\n{first}");
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|message| match message {
                Message::Text { text: said, .. } => said.clone(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_test_is_marked_first_or_in_its_first_text_when_five_messages_fill_it() {
        let one = vec![text("How was lunch?")];
        assert_eq!(
            texts(&marked(one)),
            vec![TEST_NOTICE.to_owned(), "How was lunch?".to_owned()]
        );
        let five: Vec<Message> = (1..=5).map(|i| text(format!("m{i}"))).collect();
        let marked = texts(&marked(five));
        assert_eq!(marked.len(), 5);
        assert_eq!(marked[0], format!("{TEST_NOTICE}\nm1"));
    }
}
