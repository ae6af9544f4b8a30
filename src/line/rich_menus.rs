//! LINE's rich menu endpoints: menus, their images (on the data host),
//! aliases, the account's default, per-user links and the batch that moves
//! every user of one menu to another.
//!
//! Only a deploy and the link sender call them, never the webhook path. Every
//! call reports LINE's refusal with its `details` (the property LINE names and
//! its problem): they are about the service's own menu files, never a user's
//! data, so they are safe to log and to print.

use super::client::SendError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `POST /v2/bot/richmenu`'s body (LINE's `RichMenuRequest`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RichMenuRequest {
    pub(crate) size: MenuSize,
    pub(crate) selected: bool,
    /// Not shown to users; the service writes the menu's id and hash here.
    pub(crate) name: String,
    pub(crate) chat_bar_text: String,
    pub(crate) areas: Vec<MenuArea>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct MenuSize {
    pub(crate) width: u32,
    pub(crate) height: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct MenuArea {
    pub(crate) bounds: MenuBounds,
    pub(crate) action: MenuAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct MenuBounds {
    pub(crate) x: u32,
    pub(crate) y: u32,
    pub(crate) width: u32,
    pub(crate) height: u32,
}

/// The actions a menu file's areas become.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum MenuAction {
    Postback {
        data: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    Uri {
        uri: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    Message {
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    #[serde(rename = "richmenuswitch", rename_all = "camelCase")]
    RichMenuSwitch {
        rich_menu_alias_id: String,
        data: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
}

/// A menu on LINE, as its list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedMenu {
    pub(crate) rich_menu_id: String,
    #[serde(default)]
    pub(crate) name: String,
}

/// One operation of `POST /v2/bot/richmenu/batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum BatchOperation {
    /// Every user linked to `from` is linked to `to`.
    Link { from: String, to: String },
    /// Every user linked to `from` is unlinked.
    Unlink { from: String },
}

/// Where a batch stands (`GET /v2/bot/richmenu/progress/batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchPhase {
    Ongoing,
    Succeeded,
    Failed,
}

/// An image's media type, as LINE takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageType {
    Png,
    Jpeg,
}

impl ImageType {
    fn content_type(self) -> &'static str {
        match self {
            ImageType::Png => "image/png",
            ImageType::Jpeg => "image/jpeg",
        }
    }
}

/// The rich menu endpoints of one channel.
#[derive(Clone)]
pub(crate) struct RichMenuApi {
    http: reqwest::Client,
    base_url: String,
    data_base_url: String,
    access_token: String,
}

/// What a call answered, before it is read.
struct Answer {
    status: u16,
    response: reqwest::Response,
}

impl RichMenuApi {
    pub(crate) fn new(
        base_url: &str,
        data_base_url: &str,
        access_token: &str,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            http: super::client::http_client(timeout)?,
            base_url: base_url.trim_end_matches('/').to_owned(),
            data_base_url: data_base_url.trim_end_matches('/').to_owned(),
            access_token: access_token.to_owned(),
        })
    }

    /// Every menu of the channel (LINE keeps at most 1,000).
    pub(crate) async fn list(&self) -> Result<Vec<ListedMenu>, SendError> {
        #[derive(Deserialize)]
        struct List {
            richmenus: Vec<ListedMenu>,
        }
        let answer = self
            .call(reqwest::Method::GET, "/v2/bot/richmenu/list", None::<&()>)
            .await?;
        let list: List = read_json(answer, "/v2/bot/richmenu/list").await?;
        Ok(list.richmenus)
    }

    /// Creates a menu; its id. Creating has no retry key: a caller that lost
    /// the answer finds the menu in [`Self::list`] by its name.
    pub(crate) async fn create(&self, menu: &RichMenuRequest) -> Result<String, SendError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Created {
            rich_menu_id: String,
        }
        let answer = self.call(reqwest::Method::POST, "/v2/bot/richmenu", Some(menu)).await?;
        let created: Created = read_json(answer, "/v2/bot/richmenu").await?;
        Ok(created.rich_menu_id)
    }

    /// Uploads the menu's image (once per menu: LINE refuses a second one).
    pub(crate) async fn upload_image(&self, id: &str, image: &[u8], kind: ImageType) -> Result<(), SendError> {
        let path = format!("/v2/bot/richmenu/{}/content", encoded(id));
        let started = std::time::Instant::now();
        let response = self
            .http
            .post(format!("{}{path}", self.data_base_url))
            .bearer_auth(&self.access_token)
            .header(reqwest::header::CONTENT_TYPE, kind.content_type())
            .body(image.to_vec())
            .send()
            .await;
        let answer = answered("/v2/bot/richmenu/{richMenuId}/content", response, started).await?;
        expect_ok(answer).await
    }

    /// Whether the menu has its image (`GET .../content` on the data host).
    pub(crate) async fn has_image(&self, id: &str) -> Result<bool, SendError> {
        let path = format!("/v2/bot/richmenu/{}/content", encoded(id));
        let started = std::time::Instant::now();
        let response = self
            .http
            .get(format!("{}{path}", self.data_base_url))
            .bearer_auth(&self.access_token)
            .send()
            .await;
        let answer = answered("/v2/bot/richmenu/{richMenuId}/content", response, started).await?;
        match answer.status {
            200 => Ok(true),
            404 => Ok(false),
            _ => expect_ok(answer).await.map(|()| false),
        }
    }

    /// The menu an alias points at; `None` when there is no such alias.
    pub(crate) async fn alias(&self, alias: &str) -> Result<Option<String>, SendError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Alias {
            rich_menu_id: String,
        }
        let path = format!("/v2/bot/richmenu/alias/{}", encoded(alias));
        let answer = self.call(reqwest::Method::GET, &path, None::<&()>).await?;
        if answer.status == 404 {
            return Ok(None);
        }
        let found: Alias = read_json(answer, "/v2/bot/richmenu/alias/{richMenuAliasId}").await?;
        Ok(Some(found.rich_menu_id))
    }

    pub(crate) async fn create_alias(&self, alias: &str, id: &str) -> Result<(), SendError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Create<'a> {
            rich_menu_alias_id: &'a str,
            rich_menu_id: &'a str,
        }
        let body = Create {
            rich_menu_alias_id: alias,
            rich_menu_id: id,
        };
        let answer = self
            .call(reqwest::Method::POST, "/v2/bot/richmenu/alias", Some(&body))
            .await?;
        expect_ok(answer).await
    }

    pub(crate) async fn update_alias(&self, alias: &str, id: &str) -> Result<(), SendError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Update<'a> {
            rich_menu_id: &'a str,
        }
        let path = format!("/v2/bot/richmenu/alias/{}", encoded(alias));
        let answer = self
            .call(reqwest::Method::POST, &path, Some(&Update { rich_menu_id: id }))
            .await?;
        expect_ok(answer).await
    }

    /// Deletes an alias; `false` when there was none.
    pub(crate) async fn delete_alias(&self, alias: &str) -> Result<bool, SendError> {
        let path = format!("/v2/bot/richmenu/alias/{}", encoded(alias));
        let answer = self.call(reqwest::Method::DELETE, &path, None::<&()>).await?;
        gone_or_ok(answer).await
    }

    /// Moves or unlinks the users of whole menus; LINE's request id, the key
    /// of [`Self::batch_progress`].
    pub(crate) async fn batch(&self, operations: &[BatchOperation]) -> Result<String, SendError> {
        #[derive(Serialize)]
        struct Batch<'a> {
            operations: &'a [BatchOperation],
        }
        let answer = self
            .call(
                reqwest::Method::POST,
                "/v2/bot/richmenu/batch",
                Some(&Batch { operations }),
            )
            .await?;
        let request_id = answer
            .response
            .headers()
            .get("x-line-request-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        expect_ok(answer).await?;
        request_id.ok_or_else(|| SendError::NoAnswer("LINE accepted the batch without a request id".into()))
    }

    pub(crate) async fn batch_progress(&self, request_id: &str) -> Result<BatchPhase, SendError> {
        #[derive(Deserialize)]
        struct Progress {
            phase: String,
        }
        let path = format!("/v2/bot/richmenu/progress/batch?requestId={}", encoded(request_id));
        let answer = self.call(reqwest::Method::GET, &path, None::<&()>).await?;
        let progress: Progress = read_json(answer, "/v2/bot/richmenu/progress/batch").await?;
        Ok(match progress.phase.as_str() {
            "succeeded" => BatchPhase::Succeeded,
            "failed" => BatchPhase::Failed,
            _ => BatchPhase::Ongoing,
        })
    }

    /// The account's default menu as set through the API; `None`: none.
    pub(crate) async fn default_menu(&self) -> Result<Option<String>, SendError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Default {
            rich_menu_id: String,
        }
        let answer = self
            .call(reqwest::Method::GET, "/v2/bot/user/all/richmenu", None::<&()>)
            .await?;
        if answer.status == 404 {
            return Ok(None);
        }
        let found: Default = read_json(answer, "/v2/bot/user/all/richmenu").await?;
        Ok(Some(found.rich_menu_id))
    }

    pub(crate) async fn set_default(&self, id: &str) -> Result<(), SendError> {
        let path = format!("/v2/bot/user/all/richmenu/{}", encoded(id));
        let answer = self.call(reqwest::Method::POST, &path, None::<&()>).await?;
        expect_ok(answer).await
    }

    pub(crate) async fn cancel_default(&self) -> Result<(), SendError> {
        let answer = self
            .call(reqwest::Method::DELETE, "/v2/bot/user/all/richmenu", None::<&()>)
            .await?;
        gone_or_ok(answer).await.map(|_| ())
    }

    /// Deletes a menu; `false` when it was gone already.
    pub(crate) async fn delete(&self, id: &str) -> Result<bool, SendError> {
        let path = format!("/v2/bot/richmenu/{}", encoded(id));
        let answer = self.call(reqwest::Method::DELETE, &path, None::<&()>).await?;
        gone_or_ok(answer).await
    }

    /// Links menu `id` to `user` (LINE: the menu must have its image).
    pub(crate) async fn link_user(&self, user: &str, id: &str) -> Result<(), SendError> {
        let path = format!("/v2/bot/user/{}/richmenu/{}", encoded(user), encoded(id));
        let answer = self.call(reqwest::Method::POST, &path, None::<&()>).await?;
        expect_ok(answer).await
    }

    /// Unlinks `user`'s own menu: the account's default shows.
    pub(crate) async fn unlink_user(&self, user: &str) -> Result<(), SendError> {
        let path = format!("/v2/bot/user/{}/richmenu", encoded(user));
        let answer = self.call(reqwest::Method::DELETE, &path, None::<&()>).await?;
        expect_ok(answer).await
    }

    /// Links menu `id` to up to 500 users at once. LINE answers 202 with no
    /// per-user result.
    pub(crate) async fn bulk_link(&self, id: &str, users: &[String]) -> Result<(), SendError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Bulk<'a> {
            rich_menu_id: &'a str,
            user_ids: &'a [String],
        }
        let body = Bulk {
            rich_menu_id: id,
            user_ids: users,
        };
        let answer = self
            .call(reqwest::Method::POST, "/v2/bot/richmenu/bulk/link", Some(&body))
            .await?;
        expect_ok(answer).await
    }

    /// Unlinks the menus of up to 500 users at once.
    pub(crate) async fn bulk_unlink(&self, users: &[String]) -> Result<(), SendError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Bulk<'a> {
            user_ids: &'a [String],
        }
        let answer = self
            .call(
                reqwest::Method::POST,
                "/v2/bot/richmenu/bulk/unlink",
                Some(&Bulk { user_ids: users }),
            )
            .await?;
        expect_ok(answer).await
    }

    async fn call<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<Answer, SendError> {
        let started = std::time::Instant::now();
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base_url))
            .bearer_auth(&self.access_token);
        if let Some(body) = body {
            request = request.json(body);
        }
        answered(metric_endpoint(path), request.send().await, started).await
    }
}

/// The endpoint a call's metric names: its path with the ids (a user's
/// among them) replaced by their parameter names.
fn metric_endpoint(path: &str) -> &str {
    let path = path.split('?').next().unwrap_or(path);
    if path == "/v2/bot/user/all/richmenu" {
        path
    } else if path.starts_with("/v2/bot/user/all/richmenu/") {
        "/v2/bot/user/all/richmenu/{richMenuId}"
    } else if path.starts_with("/v2/bot/user/") && path.ends_with("/richmenu") {
        "/v2/bot/user/{userId}/richmenu"
    } else if path.starts_with("/v2/bot/user/") {
        "/v2/bot/user/{userId}/richmenu/{richMenuId}"
    } else if path.starts_with("/v2/bot/richmenu/alias/") && path != "/v2/bot/richmenu/alias/list" {
        "/v2/bot/richmenu/alias/{richMenuAliasId}"
    } else if path.starts_with("/v2/bot/richmenu/richmenu-") {
        "/v2/bot/richmenu/{richMenuId}"
    } else {
        path
    }
}

/// A path segment, percent-encoded (ids are LINE's or the service's own).
fn encoded(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC).to_string()
}

async fn answered(
    endpoint: &str,
    response: Result<reqwest::Response, reqwest::Error>,
    started: std::time::Instant,
) -> Result<Answer, SendError> {
    let response = super::client::answered(endpoint, response, started)?;
    Ok(Answer {
        status: response.status().as_u16(),
        response,
    })
}

/// 2xx, or the error LINE's status stands for.
async fn expect_ok(answer: Answer) -> Result<(), SendError> {
    match answer.status {
        200..=299 => Ok(()),
        429 => Err(SendError::RateLimited {
            retry_after: super::client::retry_after(&answer.response),
        }),
        status @ 400..=499 => Err(SendError::Rejected {
            status,
            reason: refusal(answer.response).await,
        }),
        status => Err(SendError::ServerError { status }),
    }
}

/// `true` for 2xx, `false` for 404 (gone already).
async fn gone_or_ok(answer: Answer) -> Result<bool, SendError> {
    if answer.status == 404 {
        return Ok(false);
    }
    expect_ok(answer).await.map(|()| true)
}

async fn read_json<T: serde::de::DeserializeOwned>(answer: Answer, endpoint: &str) -> Result<T, SendError> {
    if !(200..=299).contains(&answer.status) {
        expect_ok(answer).await?;
        return Err(SendError::NoAnswer(format!("{endpoint} answered without a body")));
    }
    answer
        .response
        .json::<T>()
        .await
        .map_err(|error| SendError::NoAnswer(format!("LINE's answer to {endpoint} could not be read: {error}")))
}

/// LINE's message and each of its details (`property: message`).
async fn refusal(response: reqwest::Response) -> String {
    #[derive(Deserialize)]
    struct Detail {
        #[serde(default)]
        message: String,
        #[serde(default)]
        property: Option<String>,
    }
    #[derive(Deserialize)]
    struct Refusal {
        message: String,
        #[serde(default)]
        details: Vec<Detail>,
    }
    match response.json::<Refusal>().await {
        Ok(refusal) if refusal.details.is_empty() => refusal.message,
        Ok(refusal) => {
            let details: Vec<String> = refusal
                .details
                .iter()
                .map(|detail| match &detail.property {
                    Some(property) => format!("{property}: {}", detail.message),
                    None => detail.message.clone(),
                })
                .collect();
            format!("{} ({})", refusal.message, details.join("; "))
        }
        Err(_) => "no error message".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_name_endpoints_without_ids() {
        let user = "U0123456789abcdef0123456789abcdef";
        let cases = [
            (
                format!("/v2/bot/user/{user}/richmenu"),
                "/v2/bot/user/{userId}/richmenu",
            ),
            (
                format!("/v2/bot/user/{user}/richmenu/richmenu-0a"),
                "/v2/bot/user/{userId}/richmenu/{richMenuId}",
            ),
            ("/v2/bot/user/all/richmenu".to_owned(), "/v2/bot/user/all/richmenu"),
            (
                "/v2/bot/user/all/richmenu/richmenu-0a".to_owned(),
                "/v2/bot/user/all/richmenu/{richMenuId}",
            ),
            (
                "/v2/bot/richmenu/alias/member".to_owned(),
                "/v2/bot/richmenu/alias/{richMenuAliasId}",
            ),
            (
                "/v2/bot/richmenu/richmenu-0a".to_owned(),
                "/v2/bot/richmenu/{richMenuId}",
            ),
            ("/v2/bot/richmenu/list".to_owned(), "/v2/bot/richmenu/list"),
            (
                "/v2/bot/richmenu/progress/batch?requestId=x".to_owned(),
                "/v2/bot/richmenu/progress/batch",
            ),
        ];
        for (path, expected) in cases {
            assert_eq!(metric_endpoint(&path), expected, "{path}");
        }
    }

    #[test]
    fn actions_serialise_as_line_names_them() {
        let cases = [
            (
                MenuAction::Postback {
                    data: "v=1&k=m&s=a&m=b".into(),
                    label: None,
                },
                serde_json::json!({"type": "postback", "data": "v=1&k=m&s=a&m=b"}),
            ),
            (
                MenuAction::RichMenuSwitch {
                    rich_menu_alias_id: "tab".into(),
                    data: "v=1&k=s&m=tab".into(),
                    label: Some("タブ".into()),
                },
                serde_json::json!({"type": "richmenuswitch", "richMenuAliasId": "tab", "data": "v=1&k=s&m=tab", "label": "タブ"}),
            ),
            (
                MenuAction::Uri {
                    uri: "https://example.com".into(),
                    label: None,
                },
                serde_json::json!({"type": "uri", "uri": "https://example.com"}),
            ),
            (
                MenuAction::Message {
                    text: "こんにちは".into(),
                    label: None,
                },
                serde_json::json!({"type": "message", "text": "こんにちは"}),
            ),
        ];
        for (action, expected) in cases {
            assert_eq!(serde_json::to_value(&action).unwrap(), expected);
        }
        assert_eq!(
            serde_json::to_value(BatchOperation::Link {
                from: "a".into(),
                to: "b".into()
            })
            .unwrap(),
            serde_json::json!({"type": "link", "from": "a", "to": "b"})
        );
    }
}
