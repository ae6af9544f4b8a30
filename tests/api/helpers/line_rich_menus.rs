//! LINE's rich menu endpoints in the LINE stand-in (`line_stand_in.rs` mounts
//! them ahead of its catch-all; the image endpoints, on LINE's data host
//! `api-data.line.me`, answer on the same URI). It keeps what LINE keeps for a
//! channel (menus and their images, aliases, the default menu, per-user links,
//! batches) and answers as the Messaging API reference documents it:
//!
//! - Every call needs `Authorization: Bearer ACCESS_TOKEN`, else 401
//!   `{"message": "Authentication failed"}`. Every answer carries an
//!   `x-line-request-id` (a UUID). A JSON-bodied POST without
//!   `Content-Type: application/json` answers 415, a body that is not JSON 400.
//! - `POST /v2/bot/richmenu` checks the rich menu object as LINE does: `size`
//!   (width 800 to 2500, height at least 250, width ÷ height at least 1.45),
//!   `selected` (a boolean), `name` (1 to 300 characters), `chatBarText` (1 to
//!   14), `areas` (1 to 20, each `bounds` inside `size`) and each area's action:
//!   `postback` (`data` at most 300, optional `displayText` at most 300),
//!   `uri` (`uri` at most 1,000 UTF-16 units, scheme http, https, line or tel),
//!   `message` (`text` 1 to 300), `richmenuswitch` (`richMenuAliasId` as an
//!   alias id, `data` at most 300), an optional `label` at most 20. Texts are
//!   counted in grapheme clusters, `data` and URIs in UTF-16 units (as
//!   `line_limits` counts). A problem answers 400 `{"message": "The request body
//!   has N error(s)", "details": [{"message", "property"}]}` with LINE's
//!   property paths (`size.width`, `areas[0].action.data`) and creates nothing.
//!   Success: 200 `{"richMenuId": "richmenu-<32 lowercase hex>"}`; at most 1,000
//!   menus. `POST /v2/bot/richmenu/validate` checks without creating.
//! - `POST /v2/bot/richmenu/{id}/content` (data host): `Content-Type` other than
//!   `image/png` or `image/jpeg` 415; unknown menu 404; a second upload 400
//!   `{"message": "An image has already been uploaded to the richmenu"}` (LINE
//!   never replaces an image); over 1,000,000 bytes, not the declared PNG or
//!   JPEG (read with `imagesize`), or pixels other than the menu's `size` 400
//!   (`"The image size is not allowed for richmenu"`). `GET` of the same path
//!   answers the bytes once uploaded, 404 before.
//! - `GET /v2/bot/richmenu/list` (`{"richmenus": [...]}`, creation order),
//!   `GET /v2/bot/richmenu/{id}` (404 `{"message": "Not found"}` when unknown),
//!   `DELETE /v2/bot/richmenu/{id}` (404 when unknown). Deleting a menu unlinks
//!   every user linked to it (they fall back to the default menu) and cancels
//!   the default when it was the default, as LINE does; the stand-in remembers
//!   both ([`LineStandIn::users_left_on_deleted_menus`],
//!   [`LineStandIn::deleted_default_rich_menus`]). Aliases pointing at it stay
//!   (LINE documents nothing else; [`LineStandIn::dangling_rich_menu_aliases`]).
//! - Aliases: `POST /v2/bot/richmenu/alias` `{richMenuAliasId, richMenuId}`:
//!   the alias id is `[a-z0-9_-]{1,32}` (LINE's reference and schema: lowercase
//!   only) and the menu id menu-shaped, else 400 with `details`; a menu that
//!   does not exist or has no image 400 `{"message": "richmenu not found"}`; an
//!   existing alias id 400 `{"message": "conflict richmenu alias id"}`; at most
//!   1,000 aliases. `POST /v2/bot/richmenu/alias/{aliasId}` `{richMenuId}`
//!   repoints it: an unknown alias 404 `{"message": "richmenu alias not found"}`
//!   (the reference's table: 404 for a non-existent alias), a menu without image
//!   400 as above. `GET` (404 when unknown), `DELETE` (404 when unknown) and
//!   `GET /v2/bot/richmenu/alias/list` (`{"aliases": [...]}`, by alias id).
//! - Per user (`U` and 32 lowercase hex, else 400 `{"message": "The value for
//!   the 'userId' parameter is invalid"}`): `POST
//!   /v2/bot/user/{userId}/richmenu/{richMenuId}` 200 `{}` (unknown menu 404
//!   `{"message": "Not found"}`, no image 400 `{"message": "must upload
//!   richmenu image before applying it to user"}`, nothing changes on an
//!   error); `DELETE /v2/bot/user/{userId}/richmenu` 200 `{}` (also when none
//!   was linked); `GET` 200 `{"richMenuId"}` or 404 `{"message": "the user has
//!   no richmenu"}` (only per-user links count, not the default). Every
//!   well-formed user id counts as a friend.
//! - `POST /v2/bot/richmenu/bulk/link` `{richMenuId, userIds}` and
//!   `.../bulk/unlink` `{userIds}`: 1 to 500 user ids, each well-formed (else
//!   400 `"The property, 'userIds[i]', in the request body is invalid (line:
//!   -, column: -)"`), the menu as for one user (unknown 404 `"richmenu not
//!   found"`); 202 `{}` and the links change at once (LINE: "normally within a
//!   few seconds").
//! - Default: `POST /v2/bot/user/all/richmenu/{id}` (unknown 404, no image 400
//!   as above) 200 `{}`; `GET /v2/bot/user/all/richmenu` 200 `{"richMenuId"}`
//!   or 404 `{"message": "no default richmenu"}`; `DELETE` 200 `{}`.
//! - `POST /v2/bot/richmenu/batch` `{operations, resumeRequestKey?}`: 1 to 1,000
//!   operations of `link` (`from`, `to`), `unlink` (`from`) or `unlinkAll`
//!   (alone); no `from` twice; menu-shaped ids; `resumeRequestKey`
//!   `[0-9a-zA-Z_-]{1,100}`; else 400 with `details` as in LINE's examples. A
//!   menu that does not exist 404, a `to` without image 400. Accepted: 202 `{}`
//!   with `x-line-request-id`, the key of `GET
//!   /v2/bot/richmenu/progress/batch?requestId=..` (`{"phase": "ongoing" |
//!   "succeeded" | "failed", "acceptedTime", "completedTime" once done}`; an id
//!   that is not a UUID 400, an unknown one 404). The operations take effect
//!   when the batch completes: on its N-th progress poll (default 2: the first
//!   poll answers `ongoing`, the second `succeeded`;
//!   [`LineStandIn::set_rich_menu_batch_polls`], 0 completes at once), or when
//!   a test says so ([`LineStandIn::complete_rich_menu_batches`]). They apply
//!   independently to the links as they are then (A→B and B→C move A's users to
//!   B, not C). A run can be made to fail
//!   ([`LineStandIn::fail_next_rich_menu_batch_runs`]): it applies to the first
//!   half of its users (by user id) and ends `failed`; a later batch with the
//!   same `resumeRequestKey` only processes the users the key has not processed
//!   yet, as LINE resumes. LINE documents no refusal of a batch while another
//!   is ongoing (its reference lists only 400 and 404 besides the rate limit),
//!   so the stand-in accepts both and runs them apart; a test that wants a
//!   refusal queues one (`Fault::Refuse(409)`).
//! - LINE's hourly rate limits answer 429 `{"message": "The API rate limit has
//!   been exceeded. Try again later."}` with no effect: create and delete a
//!   menu, delete an alias and progress polls 100 an hour, batches 3 an hour
//!   ([`LineStandIn::set_rich_menu_rate_limits`] turns them off).
//!
//! It records every call ([`RichMenuCall`]: method, path, JSON body or `Null`
//! for an image, status, whether it took effect, when and how long its answer
//! was held). Faults are queued per operation ([`RichMenuOp`],
//! [`LineStandIn::fail_next_rich_menu_calls`]) with line_stand_in's [`Fault`]:
//! `Refuse(status)`, `RateLimit` and `FailSlowly(d)` (500 after `d`) change
//! nothing; `AcceptThenFail` carries the call out, then answers 500 (an error
//! of LINE's own, a 400 say, stays as it was); `AcceptSlowly(d)` carries it out
//! and answers after `d`. Each per-user link and unlink call can also fail at
//! random ([`LineStandIn::fail_rich_menu_links_randomly`]: 500, no effect), or
//! reach LINE late ([`LineStandIn::delay_rich_menu_links_randomly`]: the link
//! takes effect after the delay, and its answer leaves only after that).
//! Queued faults come first. A call is recorded when it arrives, with its
//! outcome, before a slow answer is let go: a test that waits for it
//! ([`LineStandIn::wait_for_rich_menu_call`]) can kill the caller while the
//! answer is held.

use super::line_stand_in::{ACCESS_TOKEN, Fault, LineStandIn};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use unicode_segmentation::UnicodeSegmentation;
use wiremock::matchers::path_regex;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// "1 MB", read the strict way.
pub const MAX_IMAGE_BYTES: usize = 1_000_000;
/// The progress poll on which a batch completes, unless changed.
pub const DEFAULT_BATCH_POLLS: u32 = 2;
const MAX_MENUS: usize = 1000;
const MAX_ALIASES: usize = 1000;
const HOUR: Duration = Duration::from_secs(3600);
const NO_IMAGE: &str = "must upload richmenu image before applying it to user";
const BAD_IMAGE: &str = "The image size is not allowed for richmenu";
const INVALID_USER: &str = "The value for the 'userId' parameter is invalid";

/// One rich menu endpoint, to queue faults for and to find calls by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RichMenuOp {
    Create,
    /// `POST /v2/bot/richmenu/validate`.
    Validate,
    Upload,
    /// `GET .../{id}/content`.
    Download,
    List,
    Get,
    Delete,
    AliasCreate,
    AliasUpdate,
    AliasGet,
    AliasDelete,
    AliasList,
    Link,
    Unlink,
    BulkLink,
    BulkUnlink,
    Batch,
    /// `POST /v2/bot/richmenu/validate/batch`.
    ValidateBatch,
    Progress,
    SetDefault,
    GetDefault,
    CancelDefault,
    GetUserMenu,
}

impl RichMenuOp {
    /// LINE's rate limit for it, in requests an hour, where it is that low
    /// (the others allow 2,000 a second).
    fn hourly_limit(self) -> Option<usize> {
        match self {
            RichMenuOp::Create | RichMenuOp::Delete | RichMenuOp::AliasDelete | RichMenuOp::Progress => Some(100),
            RichMenuOp::Batch => Some(3),
            _ => None,
        }
    }

    /// Its request carries a JSON body.
    fn json_bodied(self) -> bool {
        matches!(
            self,
            RichMenuOp::Create
                | RichMenuOp::Validate
                | RichMenuOp::AliasCreate
                | RichMenuOp::AliasUpdate
                | RichMenuOp::BulkLink
                | RichMenuOp::BulkUnlink
                | RichMenuOp::Batch
                | RichMenuOp::ValidateBatch
        )
    }
}

/// One call to a rich menu endpoint, as the stand-in answered it.
#[derive(Debug, Clone)]
pub struct RichMenuCall {
    /// `None` for a path or method LINE does not have (answered 404).
    pub op: Option<RichMenuOp>,
    pub method: String,
    /// The URL's path (`/v2/bot/richmenu/...`), without the query.
    pub path: String,
    pub query: Option<String>,
    /// The JSON body, `Null` for an image, an empty or an unreadable body.
    pub body: Value,
    pub content_type: Option<String>,
    /// The body's length (an image's size).
    pub body_bytes: usize,
    pub status: u16,
    /// LINE carried the call out (its 2xx, or a lost acknowledgement or slow
    /// answer after carrying it out); `false` for every refusal.
    pub took_effect: bool,
    /// The `x-line-request-id` it answered (a batch's progress key).
    pub request_id: String,
    /// When the stand-in got the call.
    pub at: Instant,
    /// How long the answer was held back after `at`.
    pub delay: Duration,
}

/// A menu as LINE keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRichMenu {
    pub id: String,
    pub name: String,
    /// The rich menu object as created (what `GET` answers, with `richMenuId`).
    pub body: Value,
    pub has_image: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchPhase {
    Ongoing,
    Succeeded,
    Failed,
}

impl BatchPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchPhase::Ongoing => "ongoing",
            BatchPhase::Succeeded => "succeeded",
            BatchPhase::Failed => "failed",
        }
    }
}

/// A batch as LINE tracks it.
#[derive(Debug, Clone)]
pub struct RichMenuBatch {
    pub request_id: String,
    pub body: Value,
    pub resume_request_key: Option<String>,
    pub phase: BatchPhase,
    /// Progress polls answered for it so far.
    pub polls: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BatchOperation {
    Link { from: String, to: String },
    Unlink { from: String },
    UnlinkAll,
}

impl BatchOperation {
    fn from(&self) -> Option<&str> {
        match self {
            BatchOperation::Link { from, .. } | BatchOperation::Unlink { from } => Some(from),
            BatchOperation::UnlinkAll => None,
        }
    }
}

struct Batch {
    request_id: String,
    body: Value,
    operations: Vec<BatchOperation>,
    resume_key: Option<String>,
    accepted_time: String,
    polls: u32,
    /// The poll that completes it.
    polls_needed: u32,
    completed: Option<(BatchPhase, String)>,
}

struct Image {
    content_type: String,
    bytes: Vec<u8>,
}

struct Menu {
    id: String,
    body: Value,
    image: Option<Image>,
}

/// Everything the rich menu endpoints keep, for one stand-in (one channel).
pub(super) struct RichMenuState {
    /// In creation order.
    menus: Vec<Menu>,
    aliases: BTreeMap<String, String>,
    default: Option<String>,
    /// Per-user links: user id → menu id.
    links: BTreeMap<String, String>,
    /// (user, menu) for each user linked to a menu when it was deleted.
    left_on_deleted: Vec<(String, String)>,
    deleted_defaults: Vec<String>,
    batches: Vec<Batch>,
    /// Users each `resumeRequestKey` has processed.
    resumed: HashMap<String, HashSet<String>>,
    batch_polls: u32,
    failing_batch_runs: usize,
    calls: Vec<RichMenuCall>,
    faults: HashMap<RichMenuOp, VecDeque<Fault>>,
    /// Refusals of the next creates, as LINE words one: (property, message).
    create_refusals: VecDeque<(String, String)>,
    random_link_failures: f64,
    /// Share of per-user link calls that reach LINE late: the link takes
    /// effect only after this long, as a request held up on its way would,
    /// and is answered after that.
    late_links: (f64, Duration),
    /// Late links not landed yet, in the order they land.
    pending_links: VecDeque<LateLink>,
    rate_limits: bool,
}

impl Default for RichMenuState {
    fn default() -> Self {
        Self {
            menus: Vec::new(),
            aliases: BTreeMap::new(),
            default: None,
            links: BTreeMap::new(),
            left_on_deleted: Vec::new(),
            deleted_defaults: Vec::new(),
            batches: Vec::new(),
            resumed: HashMap::new(),
            batch_polls: DEFAULT_BATCH_POLLS,
            failing_batch_runs: 0,
            calls: Vec::new(),
            faults: HashMap::new(),
            create_refusals: VecDeque::new(),
            random_link_failures: 0.0,
            late_links: (0.0, Duration::ZERO),
            pending_links: VecDeque::new(),
            rate_limits: true,
        }
    }
}

/// A link call that reached LINE late: it takes effect at `lands`.
struct LateLink {
    lands: Instant,
    user: String,
    menu: String,
}

/// The stand-in's state, with every late link due by now landed: whoever
/// looks (a test, or a call that came after a late link's answer) sees them.
fn lock(state: &Mutex<RichMenuState>) -> MutexGuard<'_, RichMenuState> {
    // One test panicking must not hide what the stand-in saw.
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    state.land_late_links(Instant::now());
    state
}

impl RichMenuState {
    /// Lands the late links due by `now`, in the order they are due (a menu
    /// deleted meanwhile links nothing, as LINE would refuse it).
    fn land_late_links(&mut self, now: Instant) {
        while self.pending_links.front().is_some_and(|late| late.lands <= now) {
            let Some(LateLink { user, menu, .. }) = self.pending_links.pop_front() else {
                break;
            };
            if self.menu(&menu).is_some() {
                self.links.insert(user, menu);
            }
        }
    }
}

/// Mounts the endpoints on `server`, ahead of the stand-in's catch-all POST.
pub(super) async fn mount(server: &MockServer) -> Arc<Mutex<RichMenuState>> {
    let state = Arc::new(Mutex::new(RichMenuState::default()));
    Mock::given(path_regex(r"^/v2/bot/(richmenu|user/[^/]+/richmenu)(/.*)?$"))
        .respond_with(RichMenuResponder { state: state.clone() })
        .with_priority(1)
        .mount(server)
        .await;
    state
}

fn graphemes(text: &str) -> usize {
    text.graphemes(true).count()
}

fn utf16(text: &str) -> usize {
    text.encode_utf16().count()
}

/// A uniform number in `[0, 1)` from the 53 low bits of a v4 UUID (all random).
fn random_unit() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 & ((1 << 53) - 1);
    bits as f64 / (1u64 << 53) as f64
}

fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn lower_hex(text: &str, length: usize) -> bool {
    text.len() == length && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `richmenu-` and 32 lowercase hex digits, as LINE issues them.
pub fn is_rich_menu_id(id: &str) -> bool {
    id.strip_prefix("richmenu-").is_some_and(|hex| lower_hex(hex, 32))
}

/// `U` and 32 lowercase hex digits, as LINE's user ids.
pub fn is_user_id(id: &str) -> bool {
    id.strip_prefix('U').is_some_and(|hex| lower_hex(hex, 32))
}

/// `[a-z0-9_-]{1,32}`, as LINE's reference and schema allow.
pub fn is_alias_id(id: &str) -> bool {
    (1..=32).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

fn is_resume_key(key: &str) -> bool {
    (1..=100).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A URI LINE takes in a rich menu: http, https, line or tel (any case), more
/// than the scheme, no white space.
fn is_menu_uri(uri: &str) -> bool {
    let Some((scheme, rest)) = uri.split_once(':') else {
        return false;
    };
    if uri.chars().any(char::is_whitespace) {
        return false;
    }
    match scheme.to_ascii_lowercase().as_str() {
        "http" | "https" => rest.strip_prefix("//").is_some_and(|host| !host.is_empty()),
        "line" | "tel" => !rest.is_empty(),
        _ => false,
    }
}

/// Problems of a request body, as LINE's `details`: (property, message).
#[derive(Default)]
struct Problems(Vec<(String, String)>);

impl Problems {
    fn add(&mut self, property: impl Into<String>, message: impl Into<String>) {
        self.0.push((property.into(), message.into()));
    }

    /// A string field: present when `required`, at most `max` long as `count`
    /// counts, at least one character when `non_empty`.
    fn text<'a>(
        &mut self,
        value: Option<&'a Value>,
        property: &str,
        required: bool,
        non_empty: bool,
        max: usize,
        count: fn(&str) -> usize,
    ) -> Option<&'a str> {
        match value {
            None | Some(Value::Null) => {
                if required {
                    self.add(property, "must be specified");
                }
                None
            }
            Some(Value::String(text)) => {
                if non_empty && text.is_empty() {
                    self.add(property, "may not be empty");
                } else if count(text) > max {
                    self.add(property, format!("length must be at most {max}"));
                }
                Some(text)
            }
            Some(_) => {
                self.add(property, "must be a string");
                None
            }
        }
    }

    fn int(&mut self, value: Option<&Value>, property: &str) -> Option<i64> {
        match value {
            None | Some(Value::Null) => {
                self.add(property, "must be specified");
                None
            }
            Some(value) => {
                let number = value.as_i64();
                if number.is_none() {
                    self.add(property, "must be an integer");
                }
                number
            }
        }
    }

    fn answer(self) -> Option<Outcome> {
        if self.0.is_empty() {
            return None;
        }
        let details: Vec<Value> = self
            .0
            .iter()
            .map(|(property, message)| json!({"message": message, "property": property}))
            .collect();
        Some(Outcome::refused(
            400,
            json!({"message": format!("The request body has {} error(s)", details.len()), "details": details}),
        ))
    }
}

/// What LINE refuses in a rich menu object.
fn check_menu(menu: &Value, problems: &mut Problems) {
    if !menu.is_object() {
        problems.add("", "must be an object");
        return;
    }
    let size = match menu.get("size") {
        None | Some(Value::Null) => {
            problems.add("size", "must be specified");
            None
        }
        Some(size) => {
            let width = problems.int(size.get("width"), "size.width");
            let height = problems.int(size.get("height"), "size.height");
            if width.is_some_and(|width| !(800..=2500).contains(&width)) {
                problems.add("size.width", "must be between 800 and 2500");
            }
            if height.is_some_and(|height| height < 250) {
                problems.add("size.height", "must be at least 250");
            }
            match (width, height) {
                (Some(width), Some(height)) if height > 0 => {
                    if (width as f64) / (height as f64) < 1.45 {
                        problems.add("size", "width / height must be at least 1.45");
                    }
                    Some((width, height))
                }
                _ => None,
            }
        }
    };
    match menu.get("selected") {
        None | Some(Value::Null) => problems.add("selected", "must be specified"),
        Some(Value::Bool(_)) => {}
        Some(_) => problems.add("selected", "must be a boolean"),
    }
    problems.text(menu.get("name"), "name", true, true, 300, graphemes);
    problems.text(menu.get("chatBarText"), "chatBarText", true, true, 14, graphemes);
    let areas = match menu.get("areas") {
        None | Some(Value::Null) => {
            problems.add("areas", "must be specified");
            return;
        }
        Some(Value::Array(areas)) => areas,
        Some(_) => {
            problems.add("areas", "must be an array");
            return;
        }
    };
    if !(1..=20).contains(&areas.len()) {
        problems.add("areas", "size must be between 1 and 20");
        return;
    }
    for (index, area) in areas.iter().enumerate() {
        let at = format!("areas[{index}]");
        match area.get("bounds") {
            None | Some(Value::Null) => problems.add(format!("{at}.bounds"), "must be specified"),
            Some(bounds) => {
                let x = problems.int(bounds.get("x"), &format!("{at}.bounds.x"));
                let y = problems.int(bounds.get("y"), &format!("{at}.bounds.y"));
                let width = problems.int(bounds.get("width"), &format!("{at}.bounds.width"));
                let height = problems.int(bounds.get("height"), &format!("{at}.bounds.height"));
                for (value, name, least) in [(x, "x", 0), (y, "y", 0), (width, "width", 1), (height, "height", 1)] {
                    if value.is_some_and(|value| value < least) {
                        problems.add(format!("{at}.bounds.{name}"), format!("must be at least {least}"));
                    }
                }
                if let (Some(x), Some(y), Some(width), Some(height), Some((menu_width, menu_height))) =
                    (x, y, width, height, size)
                    && (x + width > menu_width || y + height > menu_height)
                {
                    problems.add(format!("{at}.bounds"), "must be inside the rich menu's size");
                }
            }
        }
        match area.get("action") {
            None | Some(Value::Null) => problems.add(format!("{at}.action"), "must be specified"),
            Some(action) => check_action(action, &format!("{at}.action"), problems),
        }
    }
}

fn check_action(action: &Value, at: &str, problems: &mut Problems) {
    let field = |name: &str| action.get(name);
    let property = |name: &str| format!("{at}.{name}");
    problems.text(field("label"), &property("label"), false, false, 20, graphemes);
    match field("type").and_then(Value::as_str) {
        None => problems.add(property("type"), "must be specified"),
        Some("postback") => {
            problems.text(field("data"), &property("data"), true, false, 300, utf16);
            problems.text(
                field("displayText"),
                &property("displayText"),
                false,
                true,
                300,
                graphemes,
            );
            problems.text(field("fillInText"), &property("fillInText"), false, false, 300, utf16);
            if let Some(option) = field("inputOption")
                && !matches!(
                    option.as_str(),
                    Some("closeRichMenu" | "openRichMenu" | "openKeyboard" | "openVoice")
                )
            {
                problems.add(property("inputOption"), "invalid inputOption");
            }
        }
        Some("uri") => {
            if let Some(uri) = problems.text(field("uri"), &property("uri"), true, true, 1000, utf16)
                && !is_menu_uri(uri)
            {
                problems.add(property("uri"), "invalid uri");
            }
        }
        Some("message") => {
            problems.text(field("text"), &property("text"), true, true, 300, graphemes);
        }
        Some("richmenuswitch") => {
            if let Some(alias) = problems.text(
                field("richMenuAliasId"),
                &property("richMenuAliasId"),
                true,
                true,
                32,
                str::len,
            ) && !is_alias_id(alias)
            {
                problems.add(property("richMenuAliasId"), "invalid richMenuAliasId");
            }
            problems.text(field("data"), &property("data"), true, false, 300, utf16);
        }
        Some("datetimepicker") => {
            problems.text(field("data"), &property("data"), true, false, 300, utf16);
            if !matches!(
                field("mode").and_then(Value::as_str),
                Some("date" | "time" | "datetime")
            ) {
                problems.add(property("mode"), "invalid mode");
            }
        }
        Some("clipboard") => {
            problems.text(
                field("clipboardText"),
                &property("clipboardText"),
                true,
                true,
                1000,
                utf16,
            );
        }
        Some("camera" | "cameraRoll" | "location") => {}
        Some(_) => problems.add(property("type"), "invalid action type"),
    }
}

/// A batch's operations and key, or its problems.
fn check_batch(body: &Value, problems: &mut Problems) -> (Vec<BatchOperation>, Option<String>) {
    let mut operations = Vec::new();
    match body.get("operations") {
        None | Some(Value::Null) => problems.add("operations", "must be specified"),
        Some(Value::Array(items)) if !(1..=1000).contains(&items.len()) => {
            problems.add("operations", "size must be between 1 and 1000");
        }
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                let at = format!("operations[{index}]");
                let mut id = |name: &str| match item.get(name).and_then(Value::as_str) {
                    Some(id) if is_rich_menu_id(id) => Some(id.to_owned()),
                    Some(_) => {
                        problems.add(format!("{at}.{name}"), "invalid richMenuId");
                        None
                    }
                    None => {
                        problems.add(format!("{at}.{name}"), "must be specified");
                        None
                    }
                };
                let operation = match item.get("type").and_then(Value::as_str) {
                    Some("link") => {
                        let (from, to) = (id("from"), id("to"));
                        from.zip(to).map(|(from, to)| BatchOperation::Link { from, to })
                    }
                    Some("unlink") => id("from").map(|from| BatchOperation::Unlink { from }),
                    Some("unlinkAll") => Some(BatchOperation::UnlinkAll),
                    Some(_) => {
                        problems.add(format!("{at}.type"), "invalid type");
                        None
                    }
                    None => {
                        problems.add(format!("{at}.type"), "must be specified");
                        None
                    }
                };
                operations.extend(operation);
            }
        }
        Some(_) => problems.add("operations", "must be an array"),
    }
    if operations.contains(&BatchOperation::UnlinkAll) && operations.len() > 1 {
        problems.add(
            "operations[].type",
            "'unlinkAll' type can't be combined with other type",
        );
    }
    let mut froms = HashSet::new();
    for from in operations.iter().filter_map(BatchOperation::from) {
        if !froms.insert(from) {
            problems.add("operations[].from", format!("from richmenu ({from}) is duplicated"));
        }
    }
    let key = match body.get("resumeRequestKey") {
        None | Some(Value::Null) => None,
        Some(Value::String(key)) if is_resume_key(key) => Some(key.clone()),
        Some(_) => {
            problems.add("resumeRequestKey", "invalid resumeRequestKey");
            None
        }
    };
    (operations, key)
}

/// What LINE answers, before faults and headers.
struct Outcome {
    status: u16,
    body: Reply,
    took_effect: bool,
    /// A batch's request id (otherwise a fresh one).
    request_id: Option<String>,
}

enum Reply {
    Json(Value),
    Bytes { content_type: String, bytes: Vec<u8> },
}

impl Outcome {
    fn refused(status: u16, body: Value) -> Self {
        Self {
            status,
            body: Reply::Json(body),
            took_effect: false,
            request_id: None,
        }
    }

    fn message(status: u16, message: &str) -> Self {
        Self::refused(status, json!({"message": message}))
    }

    /// LINE's error with an empty `details`, as several rich menu errors are.
    fn detailed(status: u16, message: &str) -> Self {
        Self::refused(status, json!({"message": message, "details": []}))
    }

    fn done(status: u16, body: Value) -> Self {
        Self {
            status,
            body: Reply::Json(body),
            took_effect: true,
            request_id: None,
        }
    }
}

/// What a path names, besides its operation.
#[derive(Default)]
struct Target {
    menu: Option<String>,
    alias: Option<String>,
    user: Option<String>,
}

fn route(method: &str, path: &str) -> Option<(RichMenuOp, Target)> {
    let rest = path.strip_prefix("/v2/bot/")?;
    let segments: Vec<String> = rest
        .split('/')
        .map(|segment| {
            percent_encoding::percent_decode_str(segment)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let menu = |id: &str| Target {
        menu: Some(id.to_owned()),
        ..Target::default()
    };
    let alias = |id: &str| Target {
        alias: Some(id.to_owned()),
        ..Target::default()
    };
    let user = |id: &str, menu: Option<&str>| Target {
        user: Some(id.to_owned()),
        menu: menu.map(str::to_owned),
        ..Target::default()
    };
    let none = Target::default;
    use RichMenuOp as Op;
    Some(match (method, segments.as_slice()) {
        ("POST", ["richmenu"]) => (Op::Create, none()),
        ("POST", ["richmenu", "validate"]) => (Op::Validate, none()),
        ("GET", ["richmenu", "list"]) => (Op::List, none()),
        ("POST", ["richmenu", "alias"]) => (Op::AliasCreate, none()),
        ("GET", ["richmenu", "alias", "list"]) => (Op::AliasList, none()),
        ("GET", ["richmenu", "alias", id]) => (Op::AliasGet, alias(id)),
        ("POST", ["richmenu", "alias", id]) => (Op::AliasUpdate, alias(id)),
        ("DELETE", ["richmenu", "alias", id]) => (Op::AliasDelete, alias(id)),
        ("POST", ["richmenu", "bulk", "link"]) => (Op::BulkLink, none()),
        ("POST", ["richmenu", "bulk", "unlink"]) => (Op::BulkUnlink, none()),
        ("POST", ["richmenu", "batch"]) => (Op::Batch, none()),
        ("POST", ["richmenu", "validate", "batch"]) => (Op::ValidateBatch, none()),
        ("GET", ["richmenu", "progress", "batch"]) => (Op::Progress, none()),
        ("POST", ["richmenu", id, "content"]) => (Op::Upload, menu(id)),
        ("GET", ["richmenu", id, "content"]) => (Op::Download, menu(id)),
        ("GET", ["richmenu", id]) => (Op::Get, menu(id)),
        ("DELETE", ["richmenu", id]) => (Op::Delete, menu(id)),
        ("GET", ["user", "all", "richmenu"]) => (Op::GetDefault, none()),
        ("DELETE", ["user", "all", "richmenu"]) => (Op::CancelDefault, none()),
        ("POST", ["user", "all", "richmenu", id]) => (Op::SetDefault, menu(id)),
        ("GET", ["user", id, "richmenu"]) => (Op::GetUserMenu, user(id, None)),
        ("DELETE", ["user", id, "richmenu"]) => (Op::Unlink, user(id, None)),
        ("POST", ["user", id, "richmenu", menu_id]) => (Op::Link, user(id, Some(menu_id))),
        _ => return None,
    })
}

/// The request's parts the endpoints read.
struct Incoming<'a> {
    target: Target,
    query: HashMap<String, String>,
    content_type: Option<String>,
    body: &'a [u8],
    /// The body read as JSON (`Null` when it is not JSON).
    json: &'a Value,
}

impl RichMenuState {
    fn menu(&self, id: &str) -> Option<&Menu> {
        self.menus.iter().find(|menu| menu.id == id)
    }

    fn menu_mut(&mut self, id: &str) -> Option<&mut Menu> {
        self.menus.iter_mut().find(|menu| menu.id == id)
    }

    fn has_image(&self, id: &str) -> bool {
        self.menu(id).is_some_and(|menu| menu.image.is_some())
    }

    fn response_object(menu: &Menu) -> Value {
        let field = |name: &str| menu.body.get(name).cloned().unwrap_or(Value::Null);
        json!({
            "richMenuId": menu.id,
            "size": field("size"),
            "selected": field("selected"),
            "name": field("name"),
            "chatBarText": field("chatBarText"),
            "areas": field("areas"),
        })
    }

    /// Creates a menu from a checked body.
    fn create(&mut self, body: &Value) -> String {
        let id = format!("richmenu-{}", uuid::Uuid::new_v4().simple());
        self.menus.push(Menu {
            id: id.clone(),
            body: body.clone(),
            image: None,
        });
        id
    }

    /// Sets `id`'s image, or LINE's refusal.
    fn upload(&mut self, id: &str, content_type: Option<&str>, bytes: &[u8]) -> Result<(), Outcome> {
        let declared = content_type
            .map(|value| value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
            .unwrap_or_default();
        if !matches!(declared.as_str(), "image/png" | "image/jpeg") {
            return Err(Outcome::message(
                415,
                &format!("The content type, '{declared}', is not supported"),
            ));
        }
        let Some(menu) = self.menu(id) else {
            return Err(Outcome::message(404, "Not found"));
        };
        if menu.image.is_some() {
            return Err(Outcome::message(
                400,
                "An image has already been uploaded to the richmenu",
            ));
        }
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(Outcome::message(400, BAD_IMAGE));
        }
        let detected = match imagesize::image_type(bytes) {
            Ok(imagesize::ImageType::Png) => "image/png",
            Ok(imagesize::ImageType::Jpeg) => "image/jpeg",
            _ => return Err(Outcome::message(400, BAD_IMAGE)),
        };
        let pixels = imagesize::blob_size(bytes).ok();
        let size = (
            menu.body["size"]["width"].as_u64(),
            menu.body["size"]["height"].as_u64(),
        );
        let matches_menu = pixels.is_some_and(|pixels| (Some(pixels.width as u64), Some(pixels.height as u64)) == size);
        if detected != declared || !matches_menu {
            return Err(Outcome::message(400, BAD_IMAGE));
        }
        if let Some(menu) = self.menu_mut(id) {
            menu.image = Some(Image {
                content_type: declared,
                bytes: bytes.to_vec(),
            });
        }
        Ok(())
    }

    fn delete(&mut self, id: &str) -> bool {
        let Some(index) = self.menus.iter().position(|menu| menu.id == id) else {
            return false;
        };
        self.menus.remove(index);
        let left: Vec<String> = self
            .links
            .iter()
            .filter(|(_, menu)| menu.as_str() == id)
            .map(|(user, _)| user.clone())
            .collect();
        for user in left {
            self.links.remove(&user);
            self.left_on_deleted.push((user, id.to_owned()));
        }
        if self.default.as_deref() == Some(id) {
            self.default = None;
            self.deleted_defaults.push(id.to_owned());
        }
        true
    }

    /// A menu that may be applied to users: 404 when unknown, 400 without image.
    fn appliable(&self, id: &str, unknown: Outcome) -> Result<(), Outcome> {
        match self.menu(id) {
            None => Err(unknown),
            Some(menu) if menu.image.is_none() => Err(Outcome::detailed(400, NO_IMAGE)),
            Some(_) => Ok(()),
        }
    }

    /// `userIds` of a bulk call: 1 to 500, each well-formed.
    fn bulk_users(body: &Value, problems: &mut Problems) -> Result<Vec<String>, Outcome> {
        let Some(users) = body.get("userIds").and_then(Value::as_array) else {
            problems.add("userIds", "must be specified");
            return Ok(Vec::new());
        };
        if !(1..=500).contains(&users.len()) {
            problems.add("userIds", "size must be between 1 and 500");
            return Ok(Vec::new());
        }
        users
            .iter()
            .enumerate()
            .map(|(index, user)| match user.as_str() {
                Some(user) if is_user_id(user) => Ok(user.to_owned()),
                _ => Err(Outcome::message(
                    400,
                    &format!("The property, 'userIds[{index}]', in the request body is invalid (line: -, column: -)"),
                )),
            })
            .collect()
    }

    /// A batch's operations, checked as LINE checks them before accepting.
    fn checked_batch(&self, body: &Value) -> Result<(Vec<BatchOperation>, Option<String>), Outcome> {
        let mut problems = Problems::default();
        let (operations, key) = check_batch(body, &mut problems);
        if let Some(refusal) = problems.answer() {
            return Err(refusal);
        }
        for operation in &operations {
            if let BatchOperation::Link { from, to } = operation {
                for id in [from, to] {
                    if self.menu(id).is_none() {
                        return Err(Outcome::message(404, "Not found"));
                    }
                }
                if !self.has_image(to) {
                    return Err(Outcome::detailed(400, NO_IMAGE));
                }
            }
            if let BatchOperation::Unlink { from } = operation
                && self.menu(from).is_none()
            {
                return Err(Outcome::message(404, "Not found"));
            }
        }
        Ok((operations, key))
    }

    /// Runs batch `index`'s operations now (once).
    fn complete_batch(&mut self, index: usize) {
        let batch = &self.batches[index];
        if batch.completed.is_some() {
            return;
        }
        let (operations, key) = (batch.operations.clone(), batch.resume_key.clone());
        // Each operation against the links as they are now, independently.
        let mut changes: Vec<(String, Option<String>)> = self
            .links
            .iter()
            .filter_map(|(user, menu)| {
                operations.iter().find_map(|operation| match operation {
                    BatchOperation::Link { from, to } if from == menu => Some((user.clone(), Some(to.clone()))),
                    BatchOperation::Unlink { from } if from == menu => Some((user.clone(), None)),
                    BatchOperation::UnlinkAll => Some((user.clone(), None)),
                    _ => None,
                })
            })
            .collect();
        if let Some(key) = &key
            && let Some(done) = self.resumed.get(key)
        {
            changes.retain(|(user, _)| !done.contains(user));
        }
        let mut failed = false;
        let take = if self.failing_batch_runs > 0 {
            self.failing_batch_runs -= 1;
            failed = true;
            changes.len() / 2
        } else {
            changes.len()
        };
        for (user, to) in changes.into_iter().take(take) {
            match to {
                // The menu went away since the batch was accepted.
                Some(to) if self.menu(&to).is_none() => {
                    failed = true;
                    continue;
                }
                Some(to) => {
                    self.links.insert(user.clone(), to);
                }
                None => {
                    self.links.remove(&user);
                }
            }
            if let Some(key) = &key {
                self.resumed.entry(key.clone()).or_default().insert(user);
            }
        }
        let phase = if failed {
            BatchPhase::Failed
        } else {
            BatchPhase::Succeeded
        };
        self.batches[index].completed = Some((phase, now_iso()));
    }

    fn progress_answer(batch: &Batch) -> Value {
        match &batch.completed {
            None => json!({"phase": "ongoing", "acceptedTime": batch.accepted_time}),
            Some((phase, completed)) => json!({
                "phase": phase.as_str(),
                "acceptedTime": batch.accepted_time,
                "completedTime": completed,
            }),
        }
    }

    /// What LINE does with a call of `op` that got past faults and limits.
    fn handle(&mut self, op: RichMenuOp, incoming: &Incoming<'_>) -> Outcome {
        use RichMenuOp as Op;
        let body = incoming.json;
        if op.json_bodied() {
            let json = incoming
                .content_type
                .as_deref()
                .is_some_and(|value| value.to_ascii_lowercase().starts_with("application/json"));
            if !json {
                let declared = incoming.content_type.as_deref().unwrap_or("");
                return Outcome::message(415, &format!("The content type, '{declared}', is not supported"));
            }
            if let Err(error) = serde_json::from_slice::<Value>(incoming.body) {
                return Outcome::message(
                    400,
                    &format!(
                        "The request body could not be parsed as JSON (line: {}, column: {})",
                        error.line(),
                        error.column()
                    ),
                );
            }
        }
        let target_menu = incoming.target.menu.as_deref().unwrap_or("");
        let target_alias = incoming.target.alias.as_deref().unwrap_or("");
        let target_user = incoming.target.user.as_deref().unwrap_or("");
        match op {
            Op::Create | Op::Validate => {
                let mut problems = Problems::default();
                check_menu(body, &mut problems);
                if let Some(refusal) = problems.answer() {
                    return refusal;
                }
                if op == Op::Validate {
                    return Outcome::done(200, json!({}));
                }
                if self.menus.len() >= MAX_MENUS {
                    return Outcome::message(400, "The maximum number of rich menus has been reached");
                }
                let id = self.create(body);
                Outcome::done(200, json!({"richMenuId": id}))
            }
            Op::Upload => match self.upload(target_menu, incoming.content_type.as_deref(), incoming.body) {
                Ok(()) => Outcome::done(200, json!({})),
                Err(refusal) => refusal,
            },
            Op::Download => match self.menu(target_menu).and_then(|menu| menu.image.as_ref()) {
                Some(image) => Outcome {
                    status: 200,
                    body: Reply::Bytes {
                        content_type: image.content_type.clone(),
                        bytes: image.bytes.clone(),
                    },
                    took_effect: true,
                    request_id: None,
                },
                None => Outcome::message(404, "Not found"),
            },
            Op::List => Outcome::done(
                200,
                json!({"richmenus": self.menus.iter().map(Self::response_object).collect::<Vec<_>>()}),
            ),
            Op::Get => match self.menu(target_menu) {
                Some(menu) => Outcome::done(200, Self::response_object(menu)),
                None => Outcome::message(404, "Not found"),
            },
            Op::Delete => {
                if self.delete(target_menu) {
                    Outcome::done(200, json!({}))
                } else {
                    Outcome::message(404, "Not found")
                }
            }
            Op::AliasCreate | Op::AliasUpdate => {
                let mut problems = Problems::default();
                let alias = if op == Op::AliasCreate {
                    match body.get("richMenuAliasId").and_then(Value::as_str) {
                        Some(alias) if is_alias_id(alias) => alias.to_owned(),
                        Some(_) => {
                            problems.add("richMenuAliasId", "invalid richMenuAliasId");
                            String::new()
                        }
                        None => {
                            problems.add("richMenuAliasId", "must be specified");
                            String::new()
                        }
                    }
                } else {
                    if !is_alias_id(target_alias) {
                        return Outcome::detailed(400, "invalid richMenuAliasId");
                    }
                    target_alias.to_owned()
                };
                let menu = match body.get("richMenuId").and_then(Value::as_str) {
                    Some(menu) if is_rich_menu_id(menu) => menu.to_owned(),
                    Some(_) => {
                        problems.add("richMenuId", "invalid richMenuId");
                        String::new()
                    }
                    None => {
                        problems.add("richMenuId", "must be specified");
                        String::new()
                    }
                };
                if let Some(refusal) = problems.answer() {
                    return refusal;
                }
                let exists = self.aliases.contains_key(&alias);
                if op == Op::AliasCreate && exists {
                    return Outcome::detailed(400, "conflict richmenu alias id");
                }
                if op == Op::AliasUpdate && !exists {
                    return Outcome::detailed(404, "richmenu alias not found");
                }
                if !self.has_image(&menu) {
                    return Outcome::detailed(400, "richmenu not found");
                }
                if op == Op::AliasCreate && self.aliases.len() >= MAX_ALIASES {
                    return Outcome::detailed(400, "The maximum number of rich menu aliases has been reached");
                }
                self.aliases.insert(alias, menu);
                Outcome::done(200, json!({}))
            }
            Op::AliasGet | Op::AliasDelete => {
                if !is_alias_id(target_alias) {
                    return Outcome::detailed(400, "invalid richMenuAliasId");
                }
                let found = if op == Op::AliasDelete {
                    self.aliases.remove(target_alias)
                } else {
                    self.aliases.get(target_alias).cloned()
                };
                match found {
                    None => Outcome::detailed(404, "richmenu alias not found"),
                    Some(_) if op == Op::AliasDelete => Outcome::done(200, json!({})),
                    Some(menu) => Outcome::done(200, json!({"richMenuAliasId": target_alias, "richMenuId": menu})),
                }
            }
            Op::AliasList => Outcome::done(
                200,
                json!({"aliases": self
                    .aliases
                    .iter()
                    .map(|(alias, menu)| json!({"richMenuAliasId": alias, "richMenuId": menu}))
                    .collect::<Vec<_>>()}),
            ),
            Op::Link => {
                if !is_user_id(target_user) {
                    return Outcome::message(400, INVALID_USER);
                }
                if let Err(refusal) = self.appliable(target_menu, Outcome::message(404, "Not found")) {
                    return refusal;
                }
                self.links.insert(target_user.to_owned(), target_menu.to_owned());
                Outcome::done(200, json!({}))
            }
            Op::Unlink => {
                if !is_user_id(target_user) {
                    return Outcome::message(400, INVALID_USER);
                }
                self.links.remove(target_user);
                Outcome::done(200, json!({}))
            }
            Op::GetUserMenu => {
                if !is_user_id(target_user) {
                    return Outcome::message(400, INVALID_USER);
                }
                match self.links.get(target_user) {
                    Some(menu) => Outcome::done(200, json!({"richMenuId": menu})),
                    None => Outcome::detailed(404, "the user has no richmenu"),
                }
            }
            Op::BulkLink | Op::BulkUnlink => {
                let mut problems = Problems::default();
                let menu = if op == Op::BulkLink {
                    match body.get("richMenuId").and_then(Value::as_str) {
                        Some(menu) if is_rich_menu_id(menu) => Some(menu.to_owned()),
                        Some(_) => {
                            problems.add("richMenuId", "invalid richMenuId");
                            None
                        }
                        None => {
                            problems.add("richMenuId", "must be specified");
                            None
                        }
                    }
                } else {
                    None
                };
                let users = Self::bulk_users(body, &mut problems);
                if let Some(refusal) = problems.answer() {
                    return refusal;
                }
                let users = match users {
                    Ok(users) => users,
                    Err(refusal) => return refusal,
                };
                if let Some(menu) = &menu {
                    if let Err(refusal) = self.appliable(menu, Outcome::detailed(404, "richmenu not found")) {
                        return refusal;
                    }
                    for user in users {
                        self.links.insert(user, menu.clone());
                    }
                } else {
                    for user in users {
                        self.links.remove(&user);
                    }
                }
                Outcome::done(202, json!({}))
            }
            Op::Batch | Op::ValidateBatch => {
                let (operations, key) = match self.checked_batch(body) {
                    Ok(checked) => checked,
                    Err(refusal) => return refusal,
                };
                if op == Op::ValidateBatch {
                    return Outcome::done(200, json!({}));
                }
                let request_id = uuid::Uuid::new_v4().to_string();
                self.batches.push(Batch {
                    request_id: request_id.clone(),
                    body: body.clone(),
                    operations,
                    resume_key: key,
                    accepted_time: now_iso(),
                    polls: 0,
                    polls_needed: self.batch_polls,
                    completed: None,
                });
                if self.batch_polls == 0 {
                    self.complete_batch(self.batches.len() - 1);
                }
                Outcome {
                    request_id: Some(request_id),
                    ..Outcome::done(202, json!({}))
                }
            }
            Op::Progress => {
                let requested = incoming.query.get("requestId").map_or("", String::as_str);
                if uuid::Uuid::parse_str(requested).is_err() {
                    return Outcome::message(400, "Invalid requestId");
                }
                let Some(index) = self.batches.iter().position(|batch| batch.request_id == requested) else {
                    return Outcome::message(404, "Not found");
                };
                let batch = &mut self.batches[index];
                batch.polls += 1;
                if batch.completed.is_none() && batch.polls >= batch.polls_needed {
                    self.complete_batch(index);
                }
                Outcome::done(200, Self::progress_answer(&self.batches[index]))
            }
            Op::SetDefault => {
                if let Err(refusal) = self.appliable(target_menu, Outcome::message(404, "Not found")) {
                    return refusal;
                }
                self.default = Some(target_menu.to_owned());
                Outcome::done(200, json!({}))
            }
            Op::GetDefault => match &self.default {
                Some(menu) => Outcome::done(200, json!({"richMenuId": menu})),
                None => Outcome::detailed(404, "no default richmenu"),
            },
            Op::CancelDefault => {
                self.default = None;
                Outcome::done(200, json!({}))
            }
        }
    }

    /// Calls of `op` LINE counted against its rate limit in the last hour.
    fn calls_in_last_hour(&self, op: RichMenuOp, now: Instant) -> usize {
        self.calls
            .iter()
            .filter(|call| call.op == Some(op) && !matches!(call.status, 401 | 429))
            .filter(|call| now.duration_since(call.at) < HOUR)
            .count()
    }
}

fn internal_error() -> Outcome {
    Outcome::message(500, "Internal server error (stand-in)")
}

struct RichMenuResponder {
    state: Arc<Mutex<RichMenuState>>,
}

impl Respond for RichMenuResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let at = Instant::now();
        let method = request.method.as_str().to_owned();
        let path = request.url.path().to_owned();
        let routed = route(&method, &path);
        let op = routed.as_ref().map(|(op, _)| *op);
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header("content-type");
        let authorized = header("authorization") == Some(format!("Bearer {ACCESS_TOKEN}"));
        let json: Value = if op == Some(RichMenuOp::Upload) {
            Value::Null
        } else {
            serde_json::from_slice(&request.body).unwrap_or(Value::Null)
        };
        let mut state = lock(&self.state);
        let mut delay = Duration::ZERO;
        let mut retry_after = None;
        let outcome = match routed {
            _ if !authorized => Outcome::message(401, "Authentication failed"),
            None => Outcome::message(404, "Not found"),
            Some((op, target)) => {
                let random_failure = matches!(op, RichMenuOp::Link | RichMenuOp::Unlink)
                    && state.random_link_failures > 0.0
                    && random_unit() < state.random_link_failures;
                let fault = state
                    .faults
                    .get_mut(&op)
                    .and_then(VecDeque::pop_front)
                    .or_else(|| random_failure.then_some(Fault::Refuse(500)));
                let rate_limited = state.rate_limits
                    && op
                        .hourly_limit()
                        .is_some_and(|limit| state.calls_in_last_hour(op, at) >= limit);
                let refusal = if op == RichMenuOp::Create && fault.is_none() {
                    state.create_refusals.pop_front()
                } else {
                    None
                };
                match fault {
                    _ if refusal.is_some() => {
                        let (property, message) = refusal.unwrap_or_default();
                        Outcome::refused(
                            400,
                            json!({"message": "The request body has 1 error(s)",
                                "details": [{"message": message, "property": property}]}),
                        )
                    }
                    Some(Fault::Refuse(500)) => internal_error(),
                    Some(Fault::Refuse(status)) => Outcome::message(status, "Refused by the stand-in"),
                    Some(Fault::RateLimit { retry_after_secs }) => {
                        retry_after = Some(retry_after_secs);
                        Outcome::message(429, "The API rate limit has been exceeded. Try again later.")
                    }
                    Some(Fault::MonthlyLimit) => Outcome::message(429, "You have reached your monthly limit."),
                    Some(Fault::FailSlowly(slow)) => {
                        delay = slow;
                        internal_error()
                    }
                    _ if rate_limited => {
                        Outcome::message(429, "The API rate limit has been exceeded. Try again later.")
                    }
                    carried_out => {
                        let incoming = Incoming {
                            target,
                            query: request.url.query_pairs().into_owned().collect(),
                            content_type: content_type.clone(),
                            body: &request.body,
                            json: &json,
                        };
                        let user = incoming.target.user.clone();
                        let before = user.as_ref().and_then(|user| state.links.get(user).cloned());
                        let outcome = state.handle(op, &incoming);
                        let (late_share, late_by) = state.late_links;
                        if op == RichMenuOp::Link
                            && outcome.took_effect
                            && late_share > 0.0
                            && random_unit() < late_share
                            && let (Some(user), Some(menu)) = (user, incoming.target.menu.clone())
                        {
                            // Not yet: the link lands after `late_by`, and
                            // its answer leaves after that (the delay starts
                            // once this returns), as LINE answers a call only
                            // once it is done. It lands on the first look at
                            // the state from then on ([`lock`]): a call made
                            // on the answer comes after it, however late a
                            // timer or a thread would have woken.
                            match before {
                                Some(before) => state.links.insert(user.clone(), before),
                                None => state.links.remove(&user),
                            };
                            let lands = Instant::now() + late_by;
                            let slot = state.pending_links.partition_point(|late| late.lands <= lands);
                            state.pending_links.insert(slot, LateLink { lands, user, menu });
                            delay = late_by;
                        }
                        match carried_out {
                            Some(Fault::AcceptThenFail) if outcome.took_effect => Outcome {
                                took_effect: true,
                                ..internal_error()
                            },
                            Some(Fault::AcceptSlowly(slow)) => {
                                delay = slow;
                                outcome
                            }
                            _ => outcome,
                        }
                    }
                }
            }
        };
        // A lost acknowledgement carries no batch's id: the caller never learns it.
        let request_id = outcome
            .request_id
            .clone()
            .filter(|_| (200..300).contains(&outcome.status))
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut template =
            ResponseTemplate::new(outcome.status).insert_header("x-line-request-id", request_id.as_str());
        template = match outcome.body {
            Reply::Json(body) => template.set_body_json(body),
            Reply::Bytes { content_type, bytes } => template.set_body_raw(bytes, &content_type),
        };
        if let Some(seconds) = retry_after {
            template = template.insert_header("retry-after", seconds.to_string().as_str());
        }
        if !delay.is_zero() {
            template = template.set_delay(delay);
        }
        state.calls.push(RichMenuCall {
            op,
            method,
            path,
            query: request.url.query().map(str::to_owned),
            body: json,
            content_type,
            body_bytes: request.body.len(),
            status: outcome.status,
            took_effect: outcome.took_effect,
            request_id,
            at,
            delay,
        });
        template
    }
}

impl RichMenuCall {
    /// Its body is JSON LINE reads against a request schema.
    fn is_json_post(&self) -> bool {
        self.method == "POST" && self.op.is_some_and(RichMenuOp::json_bodied)
    }
}

/// Test-side views and controls of the rich menu endpoints.
impl LineStandIn {
    fn rich_menu_state(&self) -> MutexGuard<'_, RichMenuState> {
        lock(self.rich_menu_state_cell())
    }

    /// Every menu, in creation order.
    pub fn rich_menus(&self) -> Vec<StoredRichMenu> {
        self.rich_menu_state()
            .menus
            .iter()
            .map(|menu| StoredRichMenu {
                id: menu.id.clone(),
                name: menu.body["name"].as_str().unwrap_or("").to_owned(),
                body: RichMenuState::response_object(menu),
                has_image: menu.image.is_some(),
            })
            .collect()
    }

    pub fn rich_menu(&self, id: &str) -> Option<StoredRichMenu> {
        self.rich_menus().into_iter().find(|menu| menu.id == id)
    }

    /// The image uploaded for `id`, if any.
    pub fn rich_menu_image(&self, id: &str) -> Option<Vec<u8>> {
        let state = self.rich_menu_state();
        state.menu(id)?.image.as_ref().map(|image| image.bytes.clone())
    }

    /// Alias id → menu id.
    pub fn rich_menu_aliases(&self) -> BTreeMap<String, String> {
        self.rich_menu_state().aliases.clone()
    }

    /// Aliases whose menu was deleted.
    pub fn dangling_rich_menu_aliases(&self) -> BTreeMap<String, String> {
        let state = self.rich_menu_state();
        state
            .aliases
            .iter()
            .filter(|(_, menu)| state.menu(menu).is_none())
            .map(|(alias, menu)| (alias.clone(), menu.clone()))
            .collect()
    }

    pub fn default_rich_menu(&self) -> Option<String> {
        self.rich_menu_state().default.clone()
    }

    /// The menu linked to `user` (per-user links only, not the default).
    pub fn user_rich_menu(&self, user: &str) -> Option<String> {
        self.rich_menu_state().links.get(user).cloned()
    }

    /// Every per-user link: user id → menu id.
    pub fn user_rich_menus(&self) -> BTreeMap<String, String> {
        self.rich_menu_state().links.clone()
    }

    /// Set-up: links `user` to `menu` (which must exist) as if done before the
    /// test; no call is recorded.
    pub fn link_user_rich_menu(&self, user: &str, menu: &str) {
        let mut state = self.rich_menu_state();
        assert!(state.menu(menu).is_some(), "no rich menu {menu} to link {user} to");
        state.links.insert(user.to_owned(), menu.to_owned());
    }

    /// Set-up: a menu created (and its image uploaded) before the test, with
    /// LINE's checks; no call is recorded. Returns its id.
    pub fn add_rich_menu(&self, body: Value, image: Option<(&str, &[u8])>) -> String {
        let mut state = self.rich_menu_state();
        let mut problems = Problems::default();
        check_menu(&body, &mut problems);
        assert!(problems.0.is_empty(), "LINE would refuse this menu: {:?}", problems.0);
        let id = state.create(&body);
        if let Some((content_type, bytes)) = image
            && let Err(refusal) = state.upload(&id, Some(content_type), bytes)
        {
            let Reply::Json(answer) = refusal.body else {
                unreachable!("refusals are JSON")
            };
            panic!("LINE would refuse this image: {answer}");
        }
        id
    }

    /// Set-up: an alias that points at `menu`; no call is recorded.
    pub fn add_rich_menu_alias(&self, alias: &str, menu: &str) {
        self.rich_menu_state().aliases.insert(alias.to_owned(), menu.to_owned());
    }

    /// Set-up: the account's default menu; no call is recorded.
    pub fn set_default_rich_menu(&self, menu: Option<&str>) {
        self.rich_menu_state().default = menu.map(str::to_owned);
    }

    /// (user, menu) for every user who was linked to a menu when it was
    /// deleted, in order: users a deploy left on a deleted menu.
    pub fn users_left_on_deleted_menus(&self) -> Vec<(String, String)> {
        self.rich_menu_state().left_on_deleted.clone()
    }

    /// Menus deleted while they were the account's default.
    pub fn deleted_default_rich_menus(&self) -> Vec<String> {
        self.rich_menu_state().deleted_defaults.clone()
    }

    /// Every rich menu call, in arrival order.
    pub fn rich_menu_calls(&self) -> Vec<RichMenuCall> {
        self.rich_menu_state().calls.clone()
    }

    /// The calls of `op`, in arrival order.
    pub fn rich_menu_calls_of(&self, op: RichMenuOp) -> Vec<RichMenuCall> {
        self.rich_menu_calls()
            .into_iter()
            .filter(|call| call.op == Some(op))
            .collect()
    }

    /// Waits (up to 30 s, then panics) until `n` calls of `op` have arrived:
    /// a call held by a slow fault counts from its arrival.
    pub async fn wait_for_rich_menu_call(&self, op: RichMenuOp, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let arrived = self.rich_menu_calls_of(op).len();
            if arrived >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{arrived} {op:?} calls arrived within 30 s, not {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The JSON-bodied POSTs as `[{"method", "path", "body"}]`, the input of
    /// tests/contract/check_requests.py.
    pub fn rich_menu_calls_for_contract(&self) -> Value {
        Value::Array(
            self.rich_menu_calls()
                .into_iter()
                .filter(RichMenuCall::is_json_post)
                .map(|call| json!({"method": call.method, "path": call.path, "body": call.body}))
                .collect(),
        )
    }

    /// Faults for the next calls of `op`, in order.
    pub fn fail_next_rich_menu_calls(&self, op: RichMenuOp, faults: impl IntoIterator<Item = Fault>) {
        self.rich_menu_state().faults.entry(op).or_default().extend(faults);
    }

    /// The next create is refused as LINE refuses a rule it checks: 400 with
    /// one detail naming `property` (e.g. `areas[0].action.data`).
    pub fn refuse_next_rich_menu_create(&self, property: &str, message: &str) {
        self.rich_menu_state()
            .create_refusals
            .push_back((property.to_owned(), message.to_owned()));
    }

    /// From now on each per-user link and unlink call (`POST` and `DELETE
    /// /v2/bot/user/{userId}/richmenu...`), with probability `share` and
    /// independently, answers 500 and changes nothing. `0.0` turns it off.
    /// Queued faults come first.
    pub fn fail_rich_menu_links_randomly(&self, share: f64) {
        assert!(
            (0.0..=1.0).contains(&share),
            "the share of failing calls is between 0 and 1, not {share}"
        );
        self.rich_menu_state().random_link_failures = share;
    }

    /// From now on each per-user link call, with probability `share`, takes
    /// effect only after `by`: a request that reached LINE late, after calls
    /// made later than it. It is answered once it took effect, as LINE
    /// answers: the caller, and any call it makes on that answer, finds the
    /// link in place.
    pub fn delay_rich_menu_links_randomly(&self, share: f64, by: Duration) {
        assert!((0.0..=1.0).contains(&share));
        self.rich_menu_state().late_links = (share, by);
    }

    /// Late link calls (see [`Self::delay_rich_menu_links_randomly`]) that
    /// have not taken effect yet.
    pub fn rich_menu_links_in_flight(&self) -> usize {
        self.rich_menu_state().pending_links.len()
    }

    /// The progress poll on which each batch accepted from now on completes
    /// (default 2; 0: at once, as it is accepted).
    pub fn set_rich_menu_batch_polls(&self, polls: u32) {
        self.rich_menu_state().batch_polls = polls;
    }

    /// Completes every ongoing batch now, as LINE does in the background
    /// whether or not anyone polls.
    pub fn complete_rich_menu_batches(&self) {
        let mut state = self.rich_menu_state();
        for index in 0..state.batches.len() {
            state.complete_batch(index);
        }
    }

    /// The next `runs` batch runs fail: each applies to the first half of its
    /// users (by user id) and ends `failed`.
    pub fn fail_next_rich_menu_batch_runs(&self, runs: usize) {
        self.rich_menu_state().failing_batch_runs += runs;
    }

    /// Every accepted batch, in order.
    pub fn rich_menu_batches(&self) -> Vec<RichMenuBatch> {
        self.rich_menu_state()
            .batches
            .iter()
            .map(|batch| RichMenuBatch {
                request_id: batch.request_id.clone(),
                body: batch.body.clone(),
                resume_request_key: batch.resume_key.clone(),
                phase: batch
                    .completed
                    .as_ref()
                    .map_or(BatchPhase::Ongoing, |(phase, _)| *phase),
                polls: batch.polls,
            })
            .collect()
    }

    /// LINE's hourly rate limits on creating and deleting menus, deleting
    /// aliases, batches and progress polls (on by default).
    pub fn set_rich_menu_rate_limits(&self, on: bool) {
        self.rich_menu_state().rate_limits = on;
    }
}
