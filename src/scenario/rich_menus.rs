//! Rich menus as files (`RICH_MENUS_DIR`): one TOML file per menu beside its
//! image, validated with the scenarios they start, so `line-survey check`
//! refuses what LINE would refuse at deploy time (its sizes, areas, image
//! and text limits) and what the service could not follow (an unknown
//! scenario or switch target, two default menus).

use super::limits::Counting;
use super::postback::Postback;
use super::{ScenarioError, Scenarios};
use crate::ids::{MenuId, ScenarioId};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

/// LINE's limits for a rich menu (Messaging API reference, "Rich menu object").
pub mod limits {
    pub const MIN_WIDTH: u32 = 800;
    pub const MAX_WIDTH: u32 = 2500;
    pub const MIN_HEIGHT: u32 = 250;
    /// Width ÷ height at least this.
    pub const MIN_RATIO: f64 = 1.45;
    pub const MAX_AREAS: usize = 20;
    /// "1 MB", read the safe way.
    pub const MAX_IMAGE_BYTES: u64 = 1_000_000;
    /// Counted as LINE counts it, in grapheme clusters.
    pub const MAX_CHAT_BAR_TEXT: usize = 14;
    /// An action's label (graphemes), as the scenarios' buttons.
    pub const MAX_LABEL: usize = crate::scenario::limits::MAX_LABEL_CHARS;
    /// A message action's text (graphemes).
    pub const MAX_MESSAGE_TEXT: usize = 300;
    /// A URI action's uri (UTF-16 units).
    pub const MAX_URI: usize = 1000;
    pub const MAX_ID: usize = crate::ids::MenuId::MAX_CHARS;
    /// A postback or switch action's data (characters).
    pub const MAX_POSTBACK_DATA: usize = 300;
}

/// One menu file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RichMenuFile {
    /// The service's name for it, and its alias id on LINE.
    pub id: String,
    /// The image's file name, beside the menu's file.
    pub image: String,
    pub size: Size,
    pub chat_bar_text: String,
    /// Shown open by default.
    #[serde(default)]
    pub selected: bool,
    /// The account's default menu (at most one file).
    #[serde(default)]
    pub default: bool,
    #[serde(default)]
    pub areas: Vec<Area>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Size {
    pub width: u32,
    pub height: u32,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Area {
    pub bounds: Bounds,
    pub action: Action,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

impl Bounds {
    /// Whether the two share any pixel (touching edges do not).
    fn overlaps(&self, other: &Bounds) -> bool {
        let (a_right, a_bottom) = (
            u64::from(self.x) + u64::from(self.width),
            u64::from(self.y) + u64::from(self.height),
        );
        let (b_right, b_bottom) = (
            u64::from(other.x) + u64::from(other.width),
            u64::from(other.y) + u64::from(other.height),
        );
        u64::from(self.x) < b_right
            && u64::from(other.x) < a_right
            && u64::from(self.y) < b_bottom
            && u64::from(other.y) < a_bottom
    }

    fn inside(&self, size: Size) -> bool {
        self.width > 0
            && self.height > 0
            && u64::from(self.x) + u64::from(self.width) <= u64::from(size.width)
            && u64::from(self.y) + u64::from(self.height) <= u64::from(size.height)
    }
}

/// What tapping an area does.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// Starts the scenario (a postback in the service's format).
    Scenario {
        scenario: String,
        #[serde(default)]
        label: Option<String>,
    },
    /// LINE's `richmenuswitch` to another file's menu.
    Switch {
        to: String,
        #[serde(default)]
        label: Option<String>,
    },
    Uri {
        uri: String,
        #[serde(default)]
        label: Option<String>,
    },
    Message {
        text: String,
        #[serde(default)]
        label: Option<String>,
    },
}

impl Action {
    fn label(&self) -> Option<&str> {
        match self {
            Action::Scenario { label, .. }
            | Action::Switch { label, .. }
            | Action::Uri { label, .. }
            | Action::Message { label, .. } => label.as_deref(),
        }
    }
}

/// A menu that passed every check, with its image's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct RichMenu {
    pub file: RichMenuFile,
    pub path: PathBuf,
    pub image: Vec<u8>,
    /// Its identity: a hash of the file's bytes and the image's. A deploy
    /// creates a menu on LINE only for a hash it has not deployed, and writes
    /// the hash into the menu's name there.
    pub hash: String,
}

/// How many hex digits of the SHA-256 a menu's hash keeps.
const HASH_HEX: usize = 24;

/// The name a deployed menu carries on LINE: the service's mark, the menu's
/// id and its hash, so a deploy finds what an earlier one created.
pub const LINE_NAME_PREFIX: &str = "line-survey ";

impl RichMenu {
    /// The menu's name on LINE.
    pub fn line_name(&self) -> String {
        line_name(&self.file.id, &self.hash)
    }

    /// Whether its image is a JPEG (else a PNG: the check allows no other).
    pub fn is_jpeg(&self) -> bool {
        matches!(image_facts(&self.image), Some((ImageKind::Jpeg, _)))
    }

    /// The body of LINE's create call.
    pub(crate) fn line_request(&self) -> crate::line::rich_menus::RichMenuRequest {
        use crate::line::rich_menus::{MenuAction, MenuArea, MenuBounds, MenuSize, RichMenuRequest};
        let areas = self
            .file
            .areas
            .iter()
            .map(|area| MenuArea {
                bounds: MenuBounds {
                    x: area.bounds.x,
                    y: area.bounds.y,
                    width: area.bounds.width,
                    height: area.bounds.height,
                },
                action: match &area.action {
                    Action::Scenario { scenario, label } => MenuAction::Postback {
                        // Checked at load: both ids are well formed.
                        data: menu_tap_data(scenario, &self.file.id).unwrap_or_default(),
                        label: label.clone(),
                    },
                    Action::Switch { to, label } => MenuAction::RichMenuSwitch {
                        rich_menu_alias_id: to.clone(),
                        data: MenuId::parse(to.clone())
                            .map(|to| menu_switch_data(&to))
                            .unwrap_or_default(),
                        label: label.clone(),
                    },
                    Action::Uri { uri, label } => MenuAction::Uri {
                        uri: uri.clone(),
                        label: label.clone(),
                    },
                    Action::Message { text, label } => MenuAction::Message {
                        text: text.clone(),
                        label: label.clone(),
                    },
                },
            })
            .collect();
        RichMenuRequest {
            size: MenuSize {
                width: self.file.size.width,
                height: self.file.size.height,
            },
            selected: self.file.selected,
            name: self.line_name(),
            chat_bar_text: self.file.chat_bar_text.clone(),
            areas,
        }
    }
}

/// The name on LINE of menu `id` deployed from the file with `hash`.
pub fn line_name(id: &str, hash: &str) -> String {
    format!("{LINE_NAME_PREFIX}{id} {hash}")
}

/// The identity of a menu file and its image.
fn menu_hash(text: &str, image: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"line-survey rich menu 1\0");
    hasher.update(text.as_bytes());
    hasher.update(b"\0");
    hasher.update(image);
    let mut hex = hex::encode(hasher.finalize());
    hex.truncate(HASH_HEX);
    hex
}

/// The image kinds LINE takes for a rich menu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    Png,
    Jpeg,
}

/// Loads and checks every `*.toml` of `dir` against `scenarios`: the menus,
/// or every problem found (each naming its file).
pub fn load_rich_menus(dir: &Path, scenarios: &Scenarios) -> Result<Vec<RichMenu>, Vec<ScenarioError>> {
    let problem = |file: &Path, problem: String| ScenarioError {
        file: file.to_owned(),
        scenario: None,
        node: None,
        problem,
    };
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
            .collect(),
        Err(error) => {
            return Err(vec![problem(
                dir,
                format!("cannot read the rich menu directory: {error}"),
            )]);
        }
    };
    paths.sort();
    let mut problems = Vec::new();
    let mut parsed = Vec::new();
    for path in paths {
        let file = std::fs::read_to_string(&path)
            .map_err(|error| format!("cannot read it: {error}"))
            .and_then(|text| {
                toml::from_str::<RichMenuFile>(&text)
                    .map(|file| (file, text))
                    .map_err(|error| format!("not a valid rich menu file: {error}"))
            });
        match file {
            Ok((file, text)) => parsed.push((path, file, text)),
            Err(error) => problems.push(problem(&path, error)),
        }
    }
    let ids: HashSet<&str> = parsed.iter().map(|(_, file, _)| file.id.as_str()).collect();
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    let mut defaults = Vec::new();
    let mut menus = Vec::new();
    for (path, file, text) in &parsed {
        if let Some(first) = seen.insert(file.id.as_str(), path) {
            problems.push(problem(
                path,
                format!("menu id {:?} is also the id of {}", file.id, first.display()),
            ));
        }
        if file.default {
            defaults.push(path.display().to_string());
        }
        let mut found: Vec<String> = check_file(file, scenarios, &ids);
        let image = match read_image(path, &file.image) {
            Ok(bytes) => {
                found.extend(check_image(&bytes, file.size));
                Some(bytes)
            }
            Err(error) => {
                found.push(error);
                None
            }
        };
        match image {
            Some(image) if found.is_empty() => menus.push(RichMenu {
                file: file.clone(),
                path: path.clone(),
                hash: menu_hash(text, &image),
                image,
            }),
            _ => problems.extend(
                found
                    .into_iter()
                    .map(|found| problem(path, format!("menu {:?}: {found}", file.id))),
            ),
        }
    }
    // Every menu a scenario links must be a file here.
    for loaded in scenarios.iter() {
        for node in &loaded.scenario.nodes {
            let mut named: Vec<&str> = node
                .all_actions()
                .iter()
                .filter_map(|actions| actions.rich_menu)
                .collect();
            if let super::Node::Branch(branch) = node {
                named.extend(branch.arms.iter().filter_map(|arm| arm.rich_menu.as_deref()));
            }
            for menu in named
                .into_iter()
                .filter(|menu| *menu != "default" && !ids.contains(menu))
            {
                problems.push(ScenarioError {
                    file: loaded.source.clone(),
                    scenario: Some(loaded.id().to_string()),
                    node: Some(node.id().to_string()),
                    problem: format!("rich_menu {menu:?}: no menu file in {} has that id", dir.display()),
                });
            }
        }
    }
    if defaults.len() > 1 {
        problems.push(problem(
            dir,
            format!("more than one default menu: {}", defaults.join(", ")),
        ));
    }
    if problems.is_empty() { Ok(menus) } else { Err(problems) }
}

/// The image named by a menu file: a plain file name beside it.
fn read_image(menu: &Path, name: &str) -> Result<Vec<u8>, String> {
    let plain = !name.is_empty()
        && Path::new(name).file_name().and_then(|file| file.to_str()) == Some(name)
        && name != ".."
        && name != ".";
    if !plain {
        return Err(format!("image {name:?} must be a file name beside the menu's file"));
    }
    let path = menu.parent().unwrap_or(Path::new(".")).join(name);
    // A plain file of its own: not a link out of the directory, a device or a pipe.
    let plain_file = std::fs::symlink_metadata(&path)
        .map_err(|error| format!("image {name:?} cannot be read: {error}"))?
        .is_file();
    if !plain_file {
        return Err(format!("image {name:?} must be a plain file, not a link or a device"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|file| file.take(limits::MAX_IMAGE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|error| format!("image {name:?} cannot be read: {error}"))?;
    if bytes.len() as u64 > limits::MAX_IMAGE_BYTES {
        return Err(format!(
            "image {name:?} is over {} bytes: LINE takes at most 1 MB",
            limits::MAX_IMAGE_BYTES
        ));
    }
    Ok(bytes)
}

/// The image's kind and pixel size, from its header.
pub fn image_facts(bytes: &[u8]) -> Option<(ImageKind, Size)> {
    let kind = match imagesize::image_type(bytes).ok()? {
        imagesize::ImageType::Png => ImageKind::Png,
        imagesize::ImageType::Jpeg => ImageKind::Jpeg,
        _ => return None,
    };
    let dimensions = imagesize::blob_size(bytes).ok()?;
    let size = Size {
        width: u32::try_from(dimensions.width).ok()?,
        height: u32::try_from(dimensions.height).ok()?,
    };
    Some((kind, size))
}

fn check_image(bytes: &[u8], declared: Size) -> Vec<String> {
    match image_facts(bytes) {
        None => vec!["the image is not a PNG or JPEG file".to_owned()],
        Some((_, actual)) if actual != declared => vec![format!(
            "the image is {}x{} pixels but size says {}x{}",
            actual.width, actual.height, declared.width, declared.height
        )],
        Some(_) => Vec::new(),
    }
}

/// Everything about a menu file but its image.
fn check_file(file: &RichMenuFile, scenarios: &Scenarios, ids: &HashSet<&str>) -> Vec<String> {
    let mut found = Vec::new();
    if MenuId::parse(file.id.clone()).is_err() {
        found.push(format!("id {:?} must be {}", file.id, MenuId::RULE));
    }
    let size = file.size;
    if !(limits::MIN_WIDTH..=limits::MAX_WIDTH).contains(&size.width) {
        found.push(format!(
            "size.width {} must be {} to {}",
            size.width,
            limits::MIN_WIDTH,
            limits::MAX_WIDTH
        ));
    }
    if size.height < limits::MIN_HEIGHT {
        found.push(format!(
            "size.height {} must be at least {}",
            size.height,
            limits::MIN_HEIGHT
        ));
    }
    if size.height > 0 && f64::from(size.width) / f64::from(size.height) < limits::MIN_RATIO {
        found.push(format!(
            "size {}x{}: width / height must be at least {}",
            size.width,
            size.height,
            limits::MIN_RATIO
        ));
    }
    let chat_bar = Counting::Graphemes.count(&file.chat_bar_text);
    if chat_bar == 0 || chat_bar > limits::MAX_CHAT_BAR_TEXT {
        found.push(format!(
            "chat_bar_text must be 1 to {} characters (it has {chat_bar})",
            limits::MAX_CHAT_BAR_TEXT
        ));
    }
    if file.areas.is_empty() || file.areas.len() > limits::MAX_AREAS {
        found.push(format!(
            "it has {} areas; a menu has 1 to {}",
            file.areas.len(),
            limits::MAX_AREAS
        ));
    }
    // Past the limit, one problem says so: no pair by pair check of a huge list.
    let areas = if file.areas.len() > limits::MAX_AREAS {
        &[][..]
    } else {
        &file.areas[..]
    };
    for (index, area) in areas.iter().enumerate() {
        let number = index + 1;
        if !area.bounds.inside(size) {
            found.push(format!(
                "area {number}: its bounds are empty or reach outside the image"
            ));
        }
        for (other_index, other) in areas.iter().enumerate().skip(index + 1) {
            if area.bounds.overlaps(&other.bounds) {
                found.push(format!("areas {number} and {} overlap", other_index + 1));
            }
        }
        found.extend(
            check_action(&area.action, &file.id, scenarios, ids)
                .into_iter()
                .map(|problem| format!("area {number}: {problem}")),
        );
    }
    found
}

fn check_action(action: &Action, own_id: &str, scenarios: &Scenarios, ids: &HashSet<&str>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(label) = action.label() {
        let length = Counting::Graphemes.count(label);
        if label.trim().is_empty() || length > limits::MAX_LABEL {
            found.push(format!("label must be 1 to {} characters", limits::MAX_LABEL));
        }
    }
    match action {
        Action::Scenario { scenario, .. } => {
            let known = ScenarioId::parse(scenario.clone())
                .ok()
                .is_some_and(|id| scenarios.get(&id).is_some());
            if !known {
                found.push(format!("scenario {scenario:?} is not a loaded scenario"));
            }
            if let Some(data) = menu_tap_data(scenario, own_id)
                && data.chars().count() > limits::MAX_POSTBACK_DATA
            {
                found.push(format!(
                    "the tap's postback data would be {} characters; LINE takes at most {}",
                    data.chars().count(),
                    limits::MAX_POSTBACK_DATA
                ));
            }
        }
        Action::Switch { to, .. } => {
            if to == own_id {
                found.push(format!("switch to {to:?} is this menu itself"));
            } else if !ids.contains(to.as_str()) {
                found.push(format!("switch to {to:?}: no menu file has that id"));
            }
        }
        Action::Uri { uri, .. } => {
            let lower = uri.to_ascii_lowercase();
            let rest = ["https://", "http://", "line://", "tel:"]
                .iter()
                .find_map(|scheme| lower.strip_prefix(scheme));
            let well_formed =
                rest.is_some_and(|rest| !rest.is_empty()) && !uri.chars().any(|c| c.is_whitespace() || c.is_control());
            if !well_formed || Counting::Utf16.count(uri) > limits::MAX_URI {
                found.push(format!(
                    "uri must be https://, http://, line:// or tel: and more, without spaces, at most {} UTF-16 units",
                    limits::MAX_URI
                ));
            }
        }
        Action::Message { text, .. } => {
            let length = Counting::Graphemes.count(text);
            if text.trim().is_empty() || length > limits::MAX_MESSAGE_TEXT {
                found.push(format!(
                    "message text must be 1 to {} characters",
                    limits::MAX_MESSAGE_TEXT
                ));
            }
        }
    }
    found
}

/// The postback data a tap on a `scenario` area of menu `menu` sends; `None`
/// when either id breaks its rule (reported apart).
pub fn menu_tap_data(scenario: &str, menu: &str) -> Option<String> {
    let postback = Postback::MenuTap {
        scenario: ScenarioId::parse(scenario).ok()?,
        menu: MenuId::parse(menu).ok()?,
    };
    Some(postback.encode())
}

/// The data of a `switch` area's `richmenuswitch` to menu `to`.
pub fn menu_switch_data(to: &MenuId) -> String {
    Postback::MenuSwitch { menu: to.clone() }.encode()
}

#[cfg(test)]
mod tests;
