//! The account's monthly message quota against what a campaign will send:
//! shown by the dry run and the status, and checked when a campaign is created
//! (409 with the figures, unless `allowOverQuota`).

use crate::line::client::{LineClient, Quota};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// LINE's figures are read at most this often for the statuses (a console
/// page polling a campaign must not call LINE each time); a creation's check
/// always reads them afresh.
const SHOWN_FOR: Duration = Duration::from_secs(60);

/// What a campaign will send against what is left this month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QuotaFigures {
    /// Messages the campaign will send: recipients times each one's messages.
    pub(crate) messages: u64,
    /// Messages the account may send this month (`None`: no limit).
    pub(crate) limit: Option<u64>,
    pub(crate) used: Option<u64>,
    pub(crate) remaining: Option<u64>,
}

impl QuotaFigures {
    pub(crate) fn of(messages: u64, quota: Option<Quota>) -> Self {
        Self {
            messages,
            limit: quota.and_then(|quota| quota.limit),
            used: quota.map(|quota| quota.used),
            remaining: quota.and_then(|quota| quota.remaining()),
        }
    }

    /// Whether sending would go beyond the month's quota.
    pub(crate) fn over(&self) -> bool {
        self.remaining.is_some_and(|remaining| self.messages > remaining)
    }
}

/// LINE's quota, read now or remembered for the statuses.
pub(super) struct QuotaReader {
    line: LineClient,
    shown: Mutex<Option<(Instant, Quota)>>,
}

impl QuotaReader {
    pub(super) fn new(line: LineClient) -> Self {
        Self {
            line,
            shown: Mutex::new(None),
        }
    }

    /// The quota as LINE says it now (`Ok(None)` in a dry run).
    pub(super) async fn now(&self) -> Result<Option<Quota>, crate::line::client::SendError> {
        let quota = self.line.message_quota().await?;
        if let (Some(quota), Ok(mut shown)) = (quota, self.shown.lock()) {
            *shown = Some((Instant::now(), quota));
        }
        Ok(quota)
    }

    /// The quota for a status: read within the last minute, or now; `None`
    /// when LINE does not say (a status never fails for it).
    pub(super) async fn for_status(&self) -> Option<Quota> {
        let recent = self
            .shown
            .lock()
            .ok()
            .and_then(|shown| *shown)
            .filter(|(read, _)| read.elapsed() < SHOWN_FOR)
            .map(|(_, quota)| quota);
        match recent {
            Some(quota) => Some(quota),
            None => self.now().await.ok().flatten(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_campaign_is_over_the_quota_only_beyond_what_is_left() {
        let limited = |limit, used| {
            Some(Quota {
                limit: Some(limit),
                used,
            })
        };
        // (messages, quota, remaining, over)
        let cases = [
            (100, limited(1000, 900), Some(100), false),
            (101, limited(1000, 900), Some(100), true),
            (1, limited(1000, 1200), Some(0), true),
            (5_000_000, Some(Quota { limit: None, used: 7 }), None, false),
            (5_000_000, None, None, false),
        ];
        for (messages, quota, remaining, over) in cases {
            let figures = QuotaFigures::of(messages, quota);
            assert_eq!(
                (figures.remaining, figures.over()),
                (remaining, over),
                "{messages} {quota:?}"
            );
        }
    }
}
