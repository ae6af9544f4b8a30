//! LINE's documented limits that scenario content must respect, counted as LINE
//! counts them (developers.line.biz, "Character counting in a text"): texts in
//! UTF-16 code units (an emoji such as 🍎 is two), and action labels, display
//! texts and a buttons template's text and title in grapheme clusters (a family
//! emoji joined with zero-width joiners is one).

use unicode_segmentation::UnicodeSegmentation;

pub const MAX_BUTTONS: usize = 4;
/// LINE's limit on quick reply buttons in one message.
pub const MAX_QUICK_REPLIES: usize = 13;
pub const MAX_LABEL_CHARS: usize = 20;
pub const MAX_DISPLAY_TEXT_CHARS: usize = 300;
pub const MAX_BUTTONS_TEXT_CHARS: usize = 160;
/// With a title (or an image) the buttons template text shrinks to 60 characters.
pub const MAX_BUTTONS_TEXT_WITH_TITLE_CHARS: usize = 60;
pub const MAX_TITLE_CHARS: usize = 40;
pub const MAX_ALT_TEXT_CHARS: usize = 400;
pub const MAX_TEXT_MESSAGE_CHARS: usize = 5000;
pub const MAX_POSTBACK_DATA_CHARS: usize = 300;
pub const MAX_IMAGE_URL_CHARS: usize = 2000;

/// How LINE counts a field's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Message texts, alt texts, postback data.
    Utf16,
    /// Labels, display texts, a buttons template's text and title.
    Graphemes,
}

impl Counting {
    pub fn count(self, text: &str) -> usize {
        match self {
            Counting::Utf16 => text.encode_utf16().count(),
            Counting::Graphemes => text.graphemes(true).count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Counting::*;

    #[test]
    fn counts_as_line_does() {
        let cases = [
            ("abc", 3, 3),
            ("アンケート", 5, 5),
            // One emoji: two UTF-16 code units, one grapheme.
            ("🍎", 2, 1),
            // A family: four people and three zero-width joiners.
            ("👨‍👩‍👧‍👦", 11, 1),
            // A rare kanji outside the BMP (𠮷) is a surrogate pair.
            ("𠮷野家", 4, 3),
            // A flag is two regional indicators.
            ("🇯🇵", 4, 1),
            ("e\u{301}", 2, 1),
        ];
        for (text, utf16, graphemes) in cases {
            assert_eq!(Utf16.count(text), utf16, "{text}");
            assert_eq!(Graphemes.count(text), graphemes, "{text}");
        }
    }
}
