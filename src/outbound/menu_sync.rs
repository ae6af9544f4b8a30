//! A user's rich menu made so on LINE: the call a `rich_menu` ledger entry
//! stands for.
//!
//! The entry carries no menu: a step records its decision on the user
//! (`users/{id}.richMenu`, with `richMenuSeq` raised in the same commit),
//! and the call applies whatever the record asks for when it is made. After
//! the call the record is read again: if the number moved (a newer decision
//! landed meanwhile, whose own call may already have been made), the newest
//! is applied again. So however calls for one user race or repeat, the last
//! one made applies the newest decision, and the user ends on it.

use crate::line::client::SendError;
use crate::line::rich_menus::RichMenuApi;
use crate::store::{Store, StoreError};

/// Rounds of "apply, read again" before the entry is retried later.
const ROUNDS: usize = 3;

/// Why a user's menu is not (yet) as their record asks.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    #[error(transparent)]
    Line(#[from] SendError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The record names a menu no deploy made (`line-survey richmenus deploy`):
    /// retried (a deploy at start-up may be under way), then parked.
    #[error("rich menu {0:?} is not deployed")]
    NotDeployed(String),
    /// The decision kept moving while it was applied: retried later.
    #[error("the user's rich menu kept changing while it was linked")]
    KeptMoving,
}

#[derive(Clone)]
pub(crate) struct MenuSync {
    api: RichMenuApi,
    store: Store,
}

impl MenuSync {
    pub(crate) fn new(api: RichMenuApi, store: Store) -> Self {
        Self { api, store }
    }

    /// Makes `user`'s menu on LINE the one their record asks for now.
    pub(crate) async fn apply(&self, user: &str) -> Result<(), SyncError> {
        for _ in 0..ROUNDS {
            let Some(asked) = self.store.asked_rich_menu(user).await? else {
                return Ok(());
            };
            let live = if asked.menu == "default" {
                self.api.unlink_user(user).await?;
                None
            } else {
                let live = self
                    .store
                    .live_rich_menu(&asked.menu)
                    .await?
                    .ok_or_else(|| SyncError::NotDeployed(asked.menu.clone()))?;
                match self.api.link_user(user, &live).await {
                    Ok(()) => {}
                    // The menu was deleted under us (a deploy replaced it
                    // between the read and the call): link its successor.
                    Err(SendError::Rejected { .. })
                        if self.store.live_rich_menu(&asked.menu).await?.as_ref() != Some(&live) =>
                    {
                        continue;
                    }
                    Err(error) => return Err(error.into()),
                }
                Some(live)
            };
            // A newer decision, or a deploy that moved the menu to a new LINE
            // menu meanwhile (ours may be deleted next): apply again.
            let now = self.store.asked_rich_menu(user).await?;
            let still_live = match &live {
                Some(live) => self.store.live_rich_menu(&asked.menu).await?.as_ref() == Some(live),
                None => true,
            };
            if now.as_ref().map(|now| now.seq) == Some(asked.seq) && still_live {
                return Ok(());
            }
        }
        Err(SyncError::KeptMoving)
    }
}
