//! The console's pages: compiled templates (maud), one stylesheet inline, no
//! script and nothing fetched from elsewhere. Every value is escaped by maud;
//! tables scroll sideways inside their box, so a page fits a phone's width.

mod access;
mod campaigns;
mod dead_letters;
mod graph;
mod results;
mod timeline;
mod users;

pub(crate) use access::{api_tokens, audit, login};
pub(crate) use campaigns::{
    campaign, campaign_builder, campaign_cancel, campaign_cancelled, campaign_preview, campaign_refused, campaigns,
};
pub(crate) use dead_letters::{dead_letters, replay_confirm};
pub(crate) use graph::scenario_graph;
pub(crate) use results::{
    AnswerFilters, CrossTabAsked, SourceCard, answer_runs, answers, cross_tab, scenarios, sources,
};
pub(crate) use users::{
    erase_confirm, hand_edit_confirm, send_choice, send_preview, send_result, timer_cancelled, user, user_search,
};

use crate::values::{ConsoleLang, OperatorRole};
use maud::{DOCTYPE, Markup, PreEscaped, html};

const STYLE: &str = "
*{box-sizing:border-box}
body{margin:0;font-family:system-ui,-apple-system,'Hiragino Sans','Noto Sans CJK JP','Yu Gothic',sans-serif;color:#1b1b1b;background:#f6f7f9;line-height:1.5}
header{background:#06c755;color:#fff;padding:.6rem 1rem;display:flex;flex-wrap:wrap;gap:.4rem 1rem;align-items:center}
header a,header button{color:#fff;text-decoration:none;font-weight:600;background:none;border:0;font:inherit;cursor:pointer;padding:0}
header form{margin-left:auto}
main{padding:1rem;max-width:60rem;margin:auto}
section{background:#fff;border-radius:.5rem;padding:1rem;margin-bottom:1rem;box-shadow:0 1px 2px #0002}
h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.1rem;margin:0 0 .6rem}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.9rem;min-width:100%}
th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #e3e3e3;vertical-align:top;word-break:normal;overflow-wrap:normal}
th,td.when{white-space:nowrap;word-break:normal}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.rows td,table.rows th{white-space:nowrap;word-break:normal}
svg{max-width:100%;height:auto;display:block}
.flash{padding:.6rem 1rem;border-radius:.4rem;margin-bottom:1rem}
.ok{background:#e6f8ee}.bad{background:#fdecea}
input,button.primary,button.danger{font:inherit;padding:.5rem .7rem;border-radius:.4rem;border:1px solid #bbb;max-width:100%}
button.primary,a.button{background:#06c755;color:#fff;border:0;cursor:pointer}
a.button{display:inline-block;padding:.4rem .7rem;border-radius:.4rem;text-decoration:none;white-space:nowrap}
button.danger{background:#c0392b;color:#fff;border:0;cursor:pointer;margin-top:.3rem}
.bar{background:#e3e3e3;border-radius:.3rem;height:.7rem;overflow:hidden}.bar span{display:block;height:100%;background:#06c755}
.muted{color:#666;font-size:.85rem}
";

/// What the header shows for a logged-in operator, and what the pages offer
/// them (the server checks each role again: a hidden button is not a check).
pub(crate) struct Nav<'a> {
    pub(crate) csrf: &'a str,
    /// The operator's email, or `ADMIN_TOKEN`.
    pub(crate) who: &'a str,
    pub(crate) role: OperatorRole,
    pub(crate) lang: ConsoleLang,
}

impl Nav<'_> {
    fn may(&self, needed: OperatorRole) -> bool {
        self.role.allows(needed)
    }

    /// The text in the console's language (Japanese first).
    fn t(&self, ja: &'static str, en: &'static str) -> &'static str {
        self.lang.t(ja, en)
    }
}

/// A role as operators read it.
pub(super) fn role_name(lang: ConsoleLang, role: OperatorRole) -> &'static str {
    match role {
        OperatorRole::Owner => lang.t("オーナー", "owner"),
        OperatorRole::Editor => lang.t("編集者", "editor"),
        OperatorRole::Viewer => lang.t("閲覧者", "viewer"),
    }
}

/// A campaign's state as operators read it: in Japanese a word, in English
/// the state as the API names it.
pub(crate) fn campaign_state(lang: ConsoleLang, state: &str) -> &str {
    match (lang, state) {
        (ConsoleLang::En, _) => state,
        (ConsoleLang::Ja, "scheduled") => "予約済み",
        (ConsoleLang::Ja, "planning") => "準備中",
        (ConsoleLang::Ja, "sending") => "配信中",
        (ConsoleLang::Ja, "cancelling") => "取り消し中",
        (ConsoleLang::Ja, "cancelled") => "取り消し済み",
        (ConsoleLang::Ja, "done") => "配信完了",
        (ConsoleLang::Ja, other) => other,
    }
}

/// A timer's state as operators read it (the API's word in English).
pub(crate) fn timer_state(lang: ConsoleLang, state: &str) -> &str {
    match (lang, state) {
        (ConsoleLang::En, _) => state,
        (ConsoleLang::Ja, "pending") => "予定",
        (ConsoleLang::Ja, "done") => "実行済み",
        (ConsoleLang::Ja, "skipped") => "見送り",
        (ConsoleLang::Ja, "cancelled") => "取り消し済み",
        (ConsoleLang::Ja, other) => other,
    }
}

fn page(lang: ConsoleLang, title: &str, nav: Option<&Nav>, body: Markup) -> Markup {
    page_refreshing(lang, title, nav, body, None)
}

/// A page that, with `refresh`, loads `path` again after that many seconds
/// (a GET, also when the page answered a form): how an operator watches
/// work in progress without a script.
fn page_refreshing(
    lang: ConsoleLang,
    title: &str,
    nav: Option<&Nav>,
    body: Markup,
    refresh: Option<(u32, &str)>,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang=(lang.as_str()) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some((seconds, path)) = refresh {
                    meta http-equiv="refresh" content={ (seconds) "; url=" (path) };
                }
                title { (title) " · line-survey" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "line-survey" }
                    @if let Some(nav) = nav {
                        a href="/console" { (nav.t("シナリオ", "Scenarios")) }
                        a href="/console/dead-letters" { (nav.t("配信失敗", "Dead letters")) }
                        a href="/console/users" { (nav.t("ユーザー", "Users")) }
                        a href="/console/campaigns" { (nav.t("一斉配信", "Campaigns")) }
                        a href="/console/sources" { (nav.t("流入経路", "Sources")) }
                        a href="/console/tokens" { (nav.t("APIトークン", "API tokens")) }
                        @if nav.may(OperatorRole::Owner) { a href="/console/audit" { (nav.t("操作履歴", "Audit log")) } }
                        span id="who" class="who" data-role=(nav.role.as_str()) { (nav.who) " (" (role_name(nav.lang, nav.role)) ")" }
                        form method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(nav.csrf);
                            button type="submit" id="logout" { (nav.t("ログアウト", "Log out")) }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

fn flash(message: Option<(bool, &str)>) -> Markup {
    html! {
        @if let Some((ok, text)) = message {
            p class={ "flash " (if ok { "ok" } else { "bad" }) } id="flash" { (text) }
        }
    }
}

/// A refused request (an expired form, a missing CSRF token): no details.
pub(crate) fn refused(lang: ConsoleLang, message: &str) -> Markup {
    page(
        lang,
        lang.t("受け付けられません", "Refused"),
        None,
        html! { section { (flash(Some((false, message)))) a href="/console" { (lang.t("コンソールに戻る", "Back to the console")) } } },
    )
}

fn rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "–".to_owned(), |rate| format!("{:.1}%", rate * 100.0))
}

/// `part` of `whole` in whole percent, 0 when there is no whole.
fn share(part: u64, whole: u64) -> u64 {
    if whole == 0 { 0 } else { percent(part, whole) }
}

/// `part` of `whole` in whole percent, 0 to 100.
fn percent(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 100;
    }
    u64::try_from(u128::from(part.min(whole)) * 100 / u128::from(whole)).unwrap_or(100)
}

/// `text` as one URL path segment or query value: every byte but ASCII letters
/// and digits percent-encoded, so an id with `/`, `?`, `#` or `%` links to itself.
fn segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// An RFC 3339 instant (the API's) as [`time`] shows it: one in UTC in
/// Japan time, one given in a scenario's zone in that zone (its offset
/// shown, or JST); anything else as is.
fn time_of_text(at: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(at) {
        Err(_) => at.to_owned(),
        Ok(at) if at.offset().local_minus_utc() == 0 || at.offset().local_minus_utc() == 9 * 3600 => {
            time(at.timestamp_millis())
        }
        Ok(at) => at.format("%Y-%m-%d %H:%M:%S UTC%:z").to_string(),
    }
}

/// An RFC 3339 instant shown in the time zone named `zone` (a scenario's),
/// as [`time_of_text`] when the zone is not one.
fn time_of_text_in(at: &str, zone: Option<&str>) -> String {
    match (
        chrono::DateTime::parse_from_rfc3339(at),
        zone.and_then(|zone| zone.parse::<chrono_tz::Tz>().ok()),
    ) {
        (Ok(at), Some(zone)) => time_in(at.timestamp_millis(), zone),
        _ => time_of_text(at),
    }
}

/// An instant in a scenario's time zone, the zone shown (`IST`, `JST`).
fn time_in(ms: i64, zone: chrono_tz::Tz) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|at| at.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z").to_string())
        .unwrap_or_default()
}

/// An instant as operators in Japan read it: Japan time, the zone shown.
fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|at| {
            at.with_timezone(&crate::scenario::DEFAULT_TIME_ZONE)
                .format("%Y-%m-%d %H:%M:%S JST")
                .to_string()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_links_are_percent_encoded() {
        for (id, encoded) in [
            ("lunch", "lunch"),
            ("a/b?c#d%", "a%2Fb%3Fc%23d%25"),
            ("満足", "%E6%BA%80%E8%B6%B3"),
        ] {
            assert_eq!(segment(id), encoded);
        }
    }

    #[test]
    fn times_show_in_japan_time_with_the_zone() {
        assert_eq!(time(0), "1970-01-01 09:00:00 JST");
        assert_eq!(time_of_text("2026-12-01T15:30:00.000Z"), "2026-12-02 00:30:00 JST");
        assert_eq!(time_of_text("not a time"), "not a time");
        // (text, zone, shown)
        let cases = [
            ("2026-12-01T15:30:00.000+09:00", None, "2026-12-01 15:30:00 JST"),
            ("2026-12-01T15:30:00.000+05:30", None, "2026-12-01 15:30:00 UTC+05:30"),
            ("2026-12-01T10:00:00Z", Some("Asia/Kolkata"), "2026-12-01 15:30:00 IST"),
            ("2026-12-01T10:00:00Z", Some("Asia/Tokyo"), "2026-12-01 19:00:00 JST"),
            ("2026-12-01T10:00:00Z", Some("Mars/Base"), "2026-12-01 19:00:00 JST"),
        ];
        for (text, zone, shown) in cases {
            assert_eq!(time_of_text_in(text, zone), shown, "{text} in {zone:?}");
        }
    }

    #[test]
    fn percents_are_whole_and_bounded() {
        for (part, whole, expected) in [
            (0, 0, 100),
            (0, 9, 0),
            (3, 9, 33),
            (9, 9, 100),
            (12, 9, 100),
            (u64::MAX, u64::MAX, 100),
        ] {
            assert_eq!(percent(part, whole), expected, "{part} of {whole}");
        }
    }
}
