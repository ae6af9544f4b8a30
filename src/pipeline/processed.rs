//! What became of one event: its outcome for the log, and its kind for the metrics.

/// What became of one event, for the log and for replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processed {
    Ignored,
    Answered,
    AlreadyAnswered,
    /// A trigger started a scenario that has a survey (after its guard read).
    StartedGuarded,
    /// A trigger started a scenario without survey nodes (no guard read).
    Started,
    NotRestarted,
    CardTapped,
    /// A card tap by a user who had answered: tagged, not restarted.
    CardTapAnswered,
    /// Another run of the same event committed first.
    AlreadyDone,
    TextRemoved,
}

impl Processed {
    pub fn as_str(self) -> &'static str {
        match self {
            Processed::Ignored => "ignored",
            Processed::Answered => "answered",
            Processed::AlreadyAnswered | Processed::CardTapAnswered => "already_answered",
            Processed::StartedGuarded | Processed::Started => "started",
            Processed::NotRestarted => "not_restarted",
            Processed::CardTapped => "card_tapped",
            Processed::AlreadyDone => "already_done",
            Processed::TextRemoved => "text_removed",
        }
    }

    /// The event kind the metrics count it under.
    pub fn metric_kind(self) -> &'static str {
        match self {
            Processed::Answered => "first_answer",
            Processed::AlreadyAnswered => "repeated_tap",
            Processed::StartedGuarded => "text_trigger_unanswered_survey",
            Processed::Started => "text_trigger_without_survey",
            Processed::NotRestarted => "text_trigger_answered_survey",
            Processed::CardTapped => "flex_tap_starting_survey",
            Processed::CardTapAnswered => "flex_tap_after_answer",
            Processed::Ignored => "ignored",
            Processed::AlreadyDone => "already_done",
            Processed::TextRemoved => "unsend",
        }
    }
}
