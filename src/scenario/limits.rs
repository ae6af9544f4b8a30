//! LINE's documented limits that scenario content must respect. LINE counts
//! characters (UTF-16 code units for some fields); counting Unicode scalar values
//! is exact for the common scripts and errs on the strict side elsewhere.

pub const MAX_BUTTONS: usize = 4;
pub const MAX_LABEL_CHARS: usize = 20;
pub const MAX_BUTTONS_TEXT_CHARS: usize = 160;
/// With a title (or an image) the buttons template text shrinks to 60 characters.
pub const MAX_BUTTONS_TEXT_WITH_TITLE_CHARS: usize = 60;
pub const MAX_TITLE_CHARS: usize = 40;
pub const MAX_ALT_TEXT_CHARS: usize = 400;
pub const MAX_TEXT_MESSAGE_CHARS: usize = 5000;
pub const MAX_POSTBACK_DATA_CHARS: usize = 300;
pub const MAX_IMAGE_URL_CHARS: usize = 2000;

pub fn chars(text: &str) -> usize {
    text.chars().count()
}
