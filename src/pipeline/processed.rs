//! What became of one event: its outcome for the log and for replays, and its
//! kind for the metrics.

use crate::metrics::series::Guard;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Processed {
    Answered,
    AlreadyAnswered,
    /// A trigger started a scenario that has a survey (after its guard read).
    StartedGuarded,
    /// A trigger started a scenario without survey nodes (no guard read).
    Started,
    /// The user answered the scenario: not started again.
    NotRestarted,
    /// Started for this user within the start dedup window: started once.
    StartDeduplicated,
    CardTapped,
    /// A card tap by a user who had answered: tagged, not restarted.
    CardTapAnswered,
    /// A card tap within the start dedup window: tagged, started once.
    CardTapDeduplicated,
    /// A rich menu tap that started its scenario.
    MenuTapped,
    /// A rich menu tap by a user who had answered: tagged, not restarted.
    MenuTapAnswered,
    /// A rich menu tap within the start dedup window: tagged, started once.
    MenuTapDeduplicated,
    /// The user unsent the message before it had an effect.
    Unsent,
    /// A text with no question open and no keyword trigger.
    NoTrigger,
    /// A typed answer that was not valid: counted, and `invalid_text` sent.
    InvalidAnswer,
    /// The last attempt was invalid too: the question closed.
    GaveUp,
    /// A date picked for a question that is not open (answered, replaced, lapsed).
    QuestionNotOpen,
    /// An answer to a question whose expiry fired first: recorded nothing.
    QuestionExpired,
    /// A follow or an unfollow recorded on the user (no trigger to start).
    Followed,
    Unfollowed,
    /// A repeated tap of an answered question that got its `answered_text`.
    AlreadyAnsweredNoticed,
    /// Text typed at a date picker that got its `hint_text`.
    Hinted,
}

impl Processed {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Processed::Answered => "answered",
            Processed::AlreadyAnswered | Processed::CardTapAnswered | Processed::MenuTapAnswered => "already_answered",
            Processed::StartedGuarded | Processed::Started => "started",
            Processed::NotRestarted => "not_restarted",
            Processed::StartDeduplicated | Processed::CardTapDeduplicated | Processed::MenuTapDeduplicated => {
                "recently_started"
            }
            Processed::CardTapped => "card_tapped",
            Processed::MenuTapped => "menu_tapped",
            Processed::Unsent => "unsent",
            Processed::NoTrigger => "no_trigger",
            Processed::InvalidAnswer => "invalid_answer",
            Processed::GaveUp => "gave_up",
            Processed::QuestionNotOpen => "question_not_open",
            Processed::QuestionExpired => "question_expired",
            Processed::Followed => "followed",
            Processed::Unfollowed => "unfollowed",
            Processed::AlreadyAnsweredNoticed => "already_answered_noticed",
            Processed::Hinted => "hinted",
        }
    }

    /// The event kind the metrics count it under.
    pub(crate) fn metric_kind(self) -> &'static str {
        match self {
            Processed::Answered => "first_answer",
            Processed::AlreadyAnswered => "repeated_tap",
            Processed::StartedGuarded => "text_trigger_unanswered_survey",
            Processed::Started => "text_trigger_without_survey",
            Processed::NotRestarted => "text_trigger_answered_survey",
            Processed::StartDeduplicated => "text_trigger_recently_started",
            Processed::CardTapped => "flex_tap_starting_survey",
            Processed::CardTapAnswered => "flex_tap_after_answer",
            Processed::CardTapDeduplicated => "flex_tap_recently_started",
            Processed::MenuTapped => "rich_menu_tap_starting",
            Processed::MenuTapAnswered => "rich_menu_tap_after_answer",
            Processed::MenuTapDeduplicated => "rich_menu_tap_recently_started",
            Processed::Unsent => "unsent_before_processing",
            Processed::NoTrigger => "text_without_trigger",
            Processed::InvalidAnswer => "invalid_typed_answer",
            Processed::GaveUp => "typed_answer_given_up",
            Processed::QuestionNotOpen => "answer_to_closed_question",
            Processed::QuestionExpired => "answer_to_expired_question",
            Processed::Followed => "follow",
            Processed::Unfollowed => "unfollow",
            Processed::AlreadyAnsweredNoticed => "repeated_tap_noticed",
            Processed::Hinted => "text_at_date_picker_hinted",
        }
    }

    /// The guard that stopped this event as a duplicate, and why; `None` when
    /// it was no duplicate.
    pub(crate) fn duplicate(self) -> Option<(Guard, &'static str)> {
        match self {
            Processed::AlreadyAnswered | Processed::AlreadyAnsweredNoticed => Some((Guard::Answer, "already_answered")),
            Processed::CardTapAnswered => Some((Guard::CardTap, "already_answered")),
            Processed::CardTapDeduplicated => Some((Guard::CardTap, "recently_started")),
            Processed::MenuTapAnswered => Some((Guard::Trigger, "already_answered")),
            Processed::MenuTapDeduplicated => Some((Guard::Trigger, "recently_started")),
            Processed::NotRestarted => Some((Guard::Trigger, "already_answered")),
            Processed::StartDeduplicated => Some((Guard::Trigger, "recently_started")),
            Processed::Answered
            | Processed::StartedGuarded
            | Processed::Started
            | Processed::CardTapped
            | Processed::MenuTapped
            | Processed::Unsent
            | Processed::NoTrigger
            | Processed::InvalidAnswer
            | Processed::GaveUp
            | Processed::QuestionNotOpen
            | Processed::QuestionExpired
            | Processed::Followed
            | Processed::Unfollowed
            | Processed::Hinted => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_guard_counts_the_duplicates_it_stopped() {
        let cases = [
            (Processed::AlreadyAnswered, Some((Guard::Answer, "already_answered"))),
            (
                Processed::AlreadyAnsweredNoticed,
                Some((Guard::Answer, "already_answered")),
            ),
            (Processed::Hinted, None),
            (Processed::CardTapAnswered, Some((Guard::CardTap, "already_answered"))),
            (
                Processed::CardTapDeduplicated,
                Some((Guard::CardTap, "recently_started")),
            ),
            (Processed::NotRestarted, Some((Guard::Trigger, "already_answered"))),
            (Processed::StartDeduplicated, Some((Guard::Trigger, "recently_started"))),
            (Processed::Answered, None),
            (Processed::CardTapped, None),
            (Processed::StartedGuarded, None),
            (Processed::Started, None),
            (Processed::Unsent, None),
            (Processed::QuestionNotOpen, None),
        ];
        for (processed, duplicate) in cases {
            assert_eq!(processed.duplicate(), duplicate, "{processed:?}");
        }
    }
}
