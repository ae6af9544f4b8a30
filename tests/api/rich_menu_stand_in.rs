//! The LINE stand-in's rich menu endpoints, driven directly (no service): a
//! menu's whole life, LINE's refusals, faults, batches, and the recorded
//! bodies against LINE's schemas (tests/contract/check_requests.py).

use crate::helpers::events::new_user;
use crate::helpers::line_rich_menus::{
    BatchPhase, DEFAULT_BATCH_POLLS, MAX_IMAGE_BYTES, RichMenuOp, is_alias_id, is_rich_menu_id, is_user_id,
};
use crate::helpers::line_stand_in::{ACCESS_TOKEN, Fault, LineStandIn};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use std::time::Duration;

/// A stand-in and a client for it.
struct Line {
    stand_in: LineStandIn,
    http: reqwest::Client,
}

/// What LINE answered.
struct Answer {
    status: u16,
    body: Value,
    bytes: Vec<u8>,
    headers: HeaderMap,
}

impl Answer {
    fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }

    fn request_id(&self) -> String {
        self.headers["x-line-request-id"].to_str().unwrap().to_owned()
    }
}

impl Line {
    async fn start() -> Self {
        Self {
            stand_in: LineStandIn::start().await,
            http: reqwest::Client::new(),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("the stand-in answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.unwrap().to_vec();
        Answer {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            bytes,
            headers,
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.stand_in.uri()))
            .bearer_auth(ACCESS_TOKEN)
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(self.request(reqwest::Method::GET, path)).await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.send(self.request(reqwest::Method::DELETE, path)).await
    }

    /// A POST without a body (links, the default).
    async fn post(&self, path: &str) -> Answer {
        self.send(self.request(reqwest::Method::POST, path)).await
    }

    async fn post_json(&self, path: &str, body: &Value) -> Answer {
        self.send(self.request(reqwest::Method::POST, path).json(body)).await
    }

    async fn upload(&self, menu: &str, content_type: &str, image: &[u8]) -> Answer {
        let request = self
            .request(reqwest::Method::POST, &format!("/v2/bot/richmenu/{menu}/content"))
            .header("content-type", content_type)
            .body(image.to_vec());
        self.send(request).await
    }

    /// Creates `body` and uploads the fixture image: the menu's id.
    async fn menu_with_image(&self, body: &Value) -> String {
        let created = self.post_json("/v2/bot/richmenu", body).await;
        assert_eq!(created.status, 200, "{}", created.body);
        let id = created.body["richMenuId"].as_str().unwrap().to_owned();
        let uploaded = self.upload(&id, "image/png", &fixture_png()).await;
        assert_eq!(uploaded.status, 200, "{}", uploaded.body);
        id
    }
}

/// A menu as tests/fixtures/richmenus/member.toml makes it (2500 × 843).
fn member_menu(name: &str) -> Value {
    json!({
        "size": {"width": 2500, "height": 843},
        "selected": false,
        "name": name,
        "chatBarText": "メニュー",
        "areas": [
            {"bounds": {"x": 0, "y": 0, "width": 1250, "height": 843},
             "action": {"type": "postback", "data": "v=1&k=m&s=ja_satisfaction&m=member", "label": "アンケート"}},
            {"bounds": {"x": 1250, "y": 0, "width": 1250, "height": 843},
             "action": {"type": "richmenuswitch", "richMenuAliasId": "survey_tab", "data": "v=1&k=s&m=survey_tab",
                        "label": "アンケートタブ"}},
        ],
    })
}

/// The committed fixture image, a 2500 × 843 PNG.
fn fixture_png() -> Vec<u8> {
    std::fs::read(crate::helpers::repo_path("tests/fixtures/richmenus/member.png")).unwrap()
}

/// A PNG's signature and header chunk only: what `imagesize` reads.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    png.extend(width.to_be_bytes());
    png.extend(height.to_be_bytes());
    png.extend([8, 2, 0, 0, 0]); // 8-bit RGB
    png.extend([0; 4]); // CRC, unread
    png
}

#[tokio::test]
async fn a_menu_goes_from_creation_through_alias_links_and_a_batch_to_deletion_as_on_line() {
    let line = Line::start().await;
    let (first, second, third) = (new_user(), new_user(), new_user());

    let created = line.post_json("/v2/bot/richmenu", &member_menu("old")).await;
    assert_eq!(created.status, 200, "{}", created.body);
    let old = created.body["richMenuId"].as_str().unwrap().to_owned();
    assert!(is_rich_menu_id(&old), "{old}");
    assert_eq!(line.get(&format!("/v2/bot/richmenu/{old}/content")).await.status, 404);
    let listed = line.get("/v2/bot/richmenu/list").await;
    assert_eq!(listed.body["richmenus"][0]["richMenuId"], old.as_str());
    assert_eq!(listed.body["richmenus"][0]["chatBarText"], "メニュー");
    let got = line.get(&format!("/v2/bot/richmenu/{old}")).await;
    assert_eq!(
        (got.status, &got.body["size"]),
        (200, &json!({"width": 2500, "height": 843}))
    );

    assert_eq!(line.upload(&old, "image/png", &fixture_png()).await.status, 200);
    let downloaded = line.get(&format!("/v2/bot/richmenu/{old}/content")).await;
    assert_eq!((downloaded.status, downloaded.bytes.clone()), (200, fixture_png()));
    assert_eq!(downloaded.headers["content-type"], "image/png");
    assert_eq!(line.stand_in.rich_menu_image(&old), Some(fixture_png()));

    let alias = json!({"richMenuAliasId": "member", "richMenuId": old});
    assert_eq!(line.post_json("/v2/bot/richmenu/alias", &alias).await.status, 200);
    assert_eq!(line.get("/v2/bot/richmenu/alias/member").await.body, alias);
    assert_eq!(
        line.get("/v2/bot/richmenu/alias/list").await.body,
        json!({"aliases": [alias]})
    );

    assert_eq!(
        line.post(&format!("/v2/bot/user/{first}/richmenu/{old}")).await.body,
        json!({})
    );
    let linked = line.get(&format!("/v2/bot/user/{first}/richmenu")).await;
    assert_eq!(linked.body, json!({"richMenuId": old}));
    assert_eq!(line.post(&format!("/v2/bot/user/all/richmenu/{old}")).await.status, 200);
    assert_eq!(
        line.get("/v2/bot/user/all/richmenu").await.body,
        json!({"richMenuId": old})
    );
    let bulk = json!({"richMenuId": old, "userIds": [second, third]});
    assert_eq!(line.post_json("/v2/bot/richmenu/bulk/link", &bulk).await.status, 202);
    let unlinked = line
        .post_json("/v2/bot/richmenu/bulk/unlink", &json!({"userIds": [third]}))
        .await;
    assert_eq!(unlinked.status, 202);
    assert_eq!(line.stand_in.user_rich_menus().into_iter().collect::<Vec<_>>(), {
        let mut expected = vec![(first.clone(), old.clone()), (second.clone(), old.clone())];
        expected.sort();
        expected
    });

    // A new version: its alias repointed, every user moved by one batch.
    let new = line.menu_with_image(&member_menu("new")).await;
    let repointed = line
        .post_json("/v2/bot/richmenu/alias/member", &json!({"richMenuId": new}))
        .await;
    assert_eq!(repointed.status, 200);
    assert_eq!(line.stand_in.rich_menu_aliases()["member"], new);
    let batch = line
        .post_json(
            "/v2/bot/richmenu/batch",
            &json!({"operations": [{"type": "link", "from": old, "to": new}], "resumeRequestKey": "deploy-1"}),
        )
        .await;
    assert_eq!((batch.status, &batch.body), (202, &json!({})));
    let request_id = batch.request_id();
    assert_eq!(DEFAULT_BATCH_POLLS, 2);
    let progress = format!("/v2/bot/richmenu/progress/batch?requestId={request_id}");
    let first_poll = line.get(&progress).await;
    assert_eq!(first_poll.body["phase"], "ongoing");
    assert!(first_poll.body["acceptedTime"].as_str().unwrap().ends_with('Z'));
    assert!(first_poll.body.get("completedTime").is_none());
    assert_eq!(
        line.stand_in.user_rich_menu(&first),
        Some(old.clone()),
        "not before it completes"
    );
    let second_poll = line.get(&progress).await;
    assert_eq!(second_poll.body["phase"], "succeeded");
    assert!(second_poll.body["completedTime"].is_string());
    assert_eq!(line.stand_in.user_rich_menu(&first), Some(new.clone()));
    assert_eq!(line.stand_in.user_rich_menu(&second), Some(new.clone()));
    let batches = line.stand_in.rich_menu_batches();
    assert_eq!(batches.len(), 1);
    assert_eq!((batches[0].phase, batches[0].polls), (BatchPhase::Succeeded, 2));
    assert_eq!(batches[0].request_id, request_id);
    assert_eq!(batches[0].resume_request_key.as_deref(), Some("deploy-1"));
    assert_eq!(batches[0].body["operations"][0]["to"], new.as_str());

    // The old menu goes: nobody was left on it, but it was the default.
    assert_eq!(line.delete(&format!("/v2/bot/richmenu/{old}")).await.status, 200);
    assert_eq!(line.get(&format!("/v2/bot/richmenu/{old}")).await.status, 404);
    assert_eq!(line.delete(&format!("/v2/bot/richmenu/{old}")).await.status, 404);
    assert!(line.stand_in.users_left_on_deleted_menus().is_empty());
    assert_eq!(line.stand_in.deleted_default_rich_menus(), std::slice::from_ref(&old));
    assert_eq!(line.stand_in.default_rich_menu(), None);
    assert_eq!(line.get("/v2/bot/user/all/richmenu").await.status, 404);
    assert!(line.stand_in.dangling_rich_menu_aliases().is_empty());

    // Deleting the new one leaves its users on a deleted menu, and its alias dangling.
    assert_eq!(line.delete(&format!("/v2/bot/user/{first}/richmenu")).await.status, 200);
    assert_eq!(line.get(&format!("/v2/bot/user/{first}/richmenu")).await.status, 404);
    assert_eq!(line.delete(&format!("/v2/bot/richmenu/{new}")).await.status, 200);
    assert_eq!(
        line.stand_in.users_left_on_deleted_menus(),
        [(second.clone(), new.clone())]
    );
    assert_eq!(line.stand_in.dangling_rich_menu_aliases()["member"], new);
    assert!(line.stand_in.rich_menus().is_empty());
    assert_eq!(line.delete("/v2/bot/richmenu/alias/member").await.status, 200);
    assert_eq!(line.get("/v2/bot/richmenu/alias/member").await.status, 404);
    assert_eq!(line.delete("/v2/bot/user/all/richmenu").await.status, 200);

    // Every call is on record, images without a body, the JSON ones for the contract.
    let calls = line.stand_in.rich_menu_calls();
    assert!(calls.iter().all(|call| call.status < 500));
    let uploads = line.stand_in.rich_menu_calls_of(RichMenuOp::Upload);
    assert_eq!(uploads.len(), 2);
    assert!(
        uploads
            .iter()
            .all(|call| call.body.is_null() && call.body_bytes == fixture_png().len())
    );
    assert_eq!(uploads[0].content_type.as_deref(), Some("image/png"));
    let polls = line.stand_in.rich_menu_calls_of(RichMenuOp::Progress);
    assert_eq!(
        polls[0].query.as_deref(),
        Some(format!("requestId={request_id}").as_str())
    );
    let batch_call = &line.stand_in.rich_menu_calls_of(RichMenuOp::Batch)[0];
    assert_eq!(
        (batch_call.request_id.as_str(), batch_call.took_effect),
        (request_id.as_str(), true)
    );
    let contract = line.stand_in.rich_menu_calls_for_contract();
    let paths: Vec<&str> = contract
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/v2/bot/richmenu",
            "/v2/bot/richmenu/alias",
            "/v2/bot/richmenu/bulk/link",
            "/v2/bot/richmenu/bulk/unlink",
            "/v2/bot/richmenu",
            "/v2/bot/richmenu/alias/member",
            "/v2/bot/richmenu/batch",
        ]
    );
    assert!(line.stand_in.calls().is_empty(), "no message call was recorded");
}

#[tokio::test]
async fn line_refuses_what_it_refuses_and_nothing_changes() {
    let line = Line::start().await;
    let user = new_user();
    let menu = line.menu_with_image(&member_menu("menu")).await;
    let bare = line.post_json("/v2/bot/richmenu", &member_menu("bare")).await.body["richMenuId"]
        .as_str()
        .unwrap()
        .to_owned();

    let unauthorized = line
        .send(
            line.http
                .get(format!("{}/v2/bot/richmenu/list", line.stand_in.uri()))
                .bearer_auth("wrong"),
        )
        .await;
    assert_eq!(
        (unauthorized.status, unauthorized.message()),
        (401, "Authentication failed")
    );

    // The menu object.
    let mut too_narrow = member_menu("narrow");
    too_narrow["size"] = json!({"width": 700, "height": 843});
    let refused = line.post_json("/v2/bot/richmenu", &too_narrow).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.message(), "The request body has 4 error(s)");
    let properties: Vec<&str> = refused.body["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|detail| detail["property"].as_str().unwrap())
        .collect();
    // Too narrow, too tall for its width, and both areas now stick out.
    assert_eq!(properties, ["size.width", "size", "areas[0].bounds", "areas[1].bounds"]);
    let mut broken = member_menu("broken");
    broken["chatBarText"] = json!("fifteen chars!!");
    broken["areas"][0]["action"]["data"] = json!("x".repeat(301));
    broken["areas"][1]["action"]["richMenuAliasId"] = json!("Survey_Tab");
    broken.as_object_mut().unwrap().remove("selected");
    let refused = line.post_json("/v2/bot/richmenu", &broken).await;
    let details: Vec<(&str, &str)> = refused.body["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|detail| {
            (
                detail["property"].as_str().unwrap(),
                detail["message"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        details,
        [
            ("selected", "must be specified"),
            ("chatBarText", "length must be at most 14"),
            ("areas[0].action.data", "length must be at most 300"),
            ("areas[1].action.richMenuAliasId", "invalid richMenuAliasId"),
        ]
    );
    let mut bad_uri = member_menu("uri");
    bad_uri["areas"][0]["action"] = json!({"type": "uri", "uri": "ftp://example.com"});
    let refused = line.post_json("/v2/bot/richmenu/validate", &bad_uri).await;
    assert_eq!(refused.body["details"][0]["message"], "invalid uri");
    assert_eq!(
        line.post_json("/v2/bot/richmenu/validate", &member_menu("ok"))
            .await
            .status,
        200
    );
    let not_json = line
        .send(
            line.request(reqwest::Method::POST, "/v2/bot/richmenu")
                .header("content-type", "application/json")
                .body("{"),
        )
        .await;
    assert_eq!(not_json.status, 400);
    assert!(
        not_json
            .message()
            .starts_with("The request body could not be parsed as JSON")
    );
    let no_type = line
        .send(
            line.request(reqwest::Method::POST, "/v2/bot/richmenu")
                .body(member_menu("x").to_string()),
        )
        .await;
    assert_eq!(no_type.status, 415);

    // Images.
    let again = line.upload(&menu, "image/png", &fixture_png()).await;
    assert_eq!(
        (again.status, again.message()),
        (400, "An image has already been uploaded to the richmenu")
    );
    assert_eq!(line.upload(&bare, "image/gif", &fixture_png()).await.status, 415);
    let wrong_pixels = line.upload(&bare, "image/png", &png_header(2500, 1686)).await;
    assert_eq!(
        (wrong_pixels.status, wrong_pixels.message()),
        (400, "The image size is not allowed for richmenu")
    );
    assert_eq!(line.upload(&bare, "image/jpeg", &fixture_png()).await.status, 400);
    let mut heavy = png_header(2500, 843);
    heavy.resize(MAX_IMAGE_BYTES + 1, 0);
    assert_eq!(line.upload(&bare, "image/png", &heavy).await.status, 400);
    let unknown = "richmenu-00000000000000000000000000000000";
    assert_eq!(line.upload(unknown, "image/png", &fixture_png()).await.status, 404);
    assert!(!line.stand_in.rich_menu(&bare).unwrap().has_image);

    // Links.
    let without_image = line.post(&format!("/v2/bot/user/{user}/richmenu/{bare}")).await;
    assert_eq!(
        (without_image.status, without_image.message()),
        (400, "must upload richmenu image before applying it to user")
    );
    assert_eq!(
        line.post(&format!("/v2/bot/user/{user}/richmenu/{unknown}"))
            .await
            .status,
        404
    );
    let bad_user = line.post(&format!("/v2/bot/user/U123/richmenu/{menu}")).await;
    assert_eq!(
        (bad_user.status, bad_user.message()),
        (400, "The value for the 'userId' parameter is invalid")
    );
    assert!(!is_user_id("U123") && is_user_id(&user));
    assert_eq!(
        line.post(&format!("/v2/bot/user/all/richmenu/{bare}")).await.status,
        400
    );
    let bulk = json!({"richMenuId": menu, "userIds": [user, "nobody"]});
    let refused = line.post_json("/v2/bot/richmenu/bulk/link", &bulk).await;
    assert_eq!(
        refused.message(),
        "The property, 'userIds[1]', in the request body is invalid (line: -, column: -)"
    );
    let empty = line
        .post_json("/v2/bot/richmenu/bulk/unlink", &json!({"userIds": []}))
        .await;
    assert_eq!(empty.body["details"][0]["property"], "userIds");
    assert_eq!(line.get(&format!("/v2/bot/user/{user}/richmenu")).await.status, 404);
    assert!(line.stand_in.user_rich_menus().is_empty());

    // Aliases.
    let alias = json!({"richMenuAliasId": "member", "richMenuId": menu});
    assert_eq!(line.post_json("/v2/bot/richmenu/alias", &alias).await.status, 200);
    let conflict = line.post_json("/v2/bot/richmenu/alias", &alias).await;
    assert_eq!(
        (conflict.status, conflict.message()),
        (400, "conflict richmenu alias id")
    );
    let to_bare = json!({"richMenuAliasId": "bare", "richMenuId": bare});
    let refused = line.post_json("/v2/bot/richmenu/alias", &to_bare).await;
    assert_eq!((refused.status, refused.message()), (400, "richmenu not found"));
    let upper = json!({"richMenuAliasId": "Member", "richMenuId": menu});
    let refused = line.post_json("/v2/bot/richmenu/alias", &upper).await;
    assert_eq!(refused.body["details"][0]["property"], "richMenuAliasId");
    assert!(!is_alias_id("Member") && is_alias_id("survey_tab-2"));
    let update = line
        .post_json("/v2/bot/richmenu/alias/nothing", &json!({"richMenuId": menu}))
        .await;
    assert_eq!((update.status, update.message()), (404, "richmenu alias not found"));
    let update = line
        .post_json("/v2/bot/richmenu/alias/member", &json!({"richMenuId": bare}))
        .await;
    assert_eq!(update.status, 400);
    assert_eq!(line.stand_in.rich_menu_aliases().len(), 1);

    // Batches.
    let mixed = json!({"operations": [{"type": "unlinkAll"}, {"type": "unlink", "from": menu}]});
    let refused = line.post_json("/v2/bot/richmenu/batch", &mixed).await;
    assert_eq!(
        refused.body["details"][0]["message"],
        "'unlinkAll' type can't be combined with other type"
    );
    let twice = json!({"operations": [{"type": "unlink", "from": menu}, {"type": "link", "from": menu, "to": menu}]});
    let refused = line.post_json("/v2/bot/richmenu/validate/batch", &twice).await;
    assert_eq!(refused.body["details"][0]["property"], "operations[].from");
    let gone = json!({"operations": [{"type": "link", "from": unknown, "to": menu}]});
    assert_eq!(line.post_json("/v2/bot/richmenu/batch", &gone).await.status, 404);
    let imageless = json!({"operations": [{"type": "link", "from": menu, "to": bare}]});
    assert_eq!(line.post_json("/v2/bot/richmenu/batch", &imageless).await.status, 400);
    let ok = json!({"operations": [{"type": "unlink", "from": menu}]});
    assert_eq!(line.post_json("/v2/bot/richmenu/validate/batch", &ok).await.status, 200);
    assert!(line.stand_in.rich_menu_batches().is_empty());
    let never = uuid::Uuid::new_v4();
    assert_eq!(
        line.get(&format!("/v2/bot/richmenu/progress/batch?requestId={never}"))
            .await
            .status,
        404
    );
    assert_eq!(
        line.get("/v2/bot/richmenu/progress/batch?requestId=x").await.status,
        400
    );

    assert_eq!(line.stand_in.rich_menus().len(), 2, "nothing refused was created");
    let refusals = line.stand_in.rich_menu_calls();
    assert!(
        refusals
            .iter()
            .filter(|call| call.status >= 400)
            .all(|call| !call.took_effect)
    );
}

#[tokio::test]
async fn faults_take_effect_or_not_as_they_say() {
    let line = Line::start().await;
    let user = new_user();

    // A lost acknowledgement: 500, yet the menu was created.
    line.stand_in
        .fail_next_rich_menu_calls(RichMenuOp::Create, [Fault::AcceptThenFail, Fault::Refuse(503)]);
    let lost = line.post_json("/v2/bot/richmenu", &member_menu("lost ack")).await;
    assert_eq!(lost.status, 500);
    let menus = line.stand_in.rich_menus();
    assert_eq!(menus.len(), 1);
    assert_eq!((menus[0].name.as_str(), menus[0].has_image), ("lost ack", false));
    assert_eq!(menus[0].body["richMenuId"], menus[0].id.as_str());
    let refused = line.post_json("/v2/bot/richmenu", &member_menu("refused")).await;
    assert_eq!(refused.status, 503);
    assert_eq!(line.stand_in.rich_menus().len(), 1);
    let creates = line.stand_in.rich_menu_calls_of(RichMenuOp::Create);
    assert_eq!(
        creates
            .iter()
            .map(|call| (call.status, call.took_effect))
            .collect::<Vec<_>>(),
        [(500, true), (503, false)]
    );

    // Set-up without calls: a menu with its image, an alias, the default.
    let menu = line
        .stand_in
        .add_rich_menu(member_menu("set up"), Some(("image/png", &fixture_png())));
    line.stand_in.add_rich_menu_alias("member", &menu);
    line.stand_in.set_default_rich_menu(Some(&menu));
    assert_eq!(line.stand_in.default_rich_menu(), Some(menu.clone()));
    assert_eq!(
        line.get("/v2/bot/richmenu/alias/member").await.body["richMenuId"],
        menu.as_str()
    );

    // A slow link: on record (and in effect) while its answer is held.
    line.stand_in
        .fail_next_rich_menu_calls(RichMenuOp::Link, [Fault::AcceptSlowly(Duration::from_secs(2))]);
    let link = format!("/v2/bot/user/{user}/richmenu/{menu}");
    let slow = line.post(&link);
    let (answer, ()) = tokio::join!(slow, async {
        line.stand_in.wait_for_rich_menu_call(RichMenuOp::Link, 1).await;
        assert_eq!(line.stand_in.user_rich_menu(&user), Some(menu.clone()));
    });
    assert_eq!(answer.status, 200);
    assert!(line.stand_in.rich_menu_calls_of(RichMenuOp::Link)[0].delay >= Duration::from_secs(2));

    // Slow failures and rate limits change nothing.
    line.stand_in.fail_next_rich_menu_calls(
        RichMenuOp::Unlink,
        [
            Fault::FailSlowly(Duration::from_millis(200)),
            Fault::RateLimit { retry_after_secs: 7 },
        ],
    );
    assert_eq!(line.delete(&format!("/v2/bot/user/{user}/richmenu")).await.status, 500);
    let limited = line.delete(&format!("/v2/bot/user/{user}/richmenu")).await;
    assert_eq!(
        (limited.status, limited.headers["retry-after"].to_str().unwrap()),
        (429, "7")
    );
    assert_eq!(line.stand_in.user_rich_menu(&user), Some(menu.clone()));

    // Random link failures: every one fails, with no effect; then none.
    let other = new_user();
    line.stand_in.link_user_rich_menu(&other, &menu);
    line.stand_in.fail_rich_menu_links_randomly(1.0);
    assert_eq!(line.delete(&format!("/v2/bot/user/{other}/richmenu")).await.status, 500);
    let third = new_user();
    assert_eq!(
        line.post(&format!("/v2/bot/user/{third}/richmenu/{menu}")).await.status,
        500
    );
    assert_eq!(line.stand_in.user_rich_menu(&other), Some(menu.clone()));
    assert_eq!(line.stand_in.user_rich_menu(&third), None);
    line.stand_in.fail_rich_menu_links_randomly(0.0);
    assert_eq!(
        line.post(&format!("/v2/bot/user/{third}/richmenu/{menu}")).await.status,
        200
    );

    // An accepted batch whose acknowledgement is lost carries no usable id.
    line.stand_in
        .fail_next_rich_menu_calls(RichMenuOp::Batch, [Fault::AcceptThenFail]);
    let lost = line
        .post_json(
            "/v2/bot/richmenu/batch",
            &json!({"operations": [{"type": "unlinkAll"}]}),
        )
        .await;
    assert_eq!(lost.status, 500);
    let batches = line.stand_in.rich_menu_batches();
    assert_eq!(batches.len(), 1);
    assert_ne!(lost.request_id(), batches[0].request_id);
    line.stand_in.complete_rich_menu_batches();
    assert!(
        line.stand_in.user_rich_menus().is_empty(),
        "unlinkAll ran in the background"
    );
}

#[tokio::test]
async fn batches_complete_on_their_poll_apply_independently_and_resume_with_their_key() {
    let line = Line::start().await;
    let image = fixture_png();
    let [a, b, c] = ["a", "b", "c"].map(|name| {
        line.stand_in
            .add_rich_menu(member_menu(name), Some(("image/png", &image)))
    });
    let mut on_a: Vec<String> = (0..4).map(|_| new_user()).collect();
    on_a.sort();
    let on_b = new_user();
    for user in &on_a {
        line.stand_in.link_user_rich_menu(user, &a);
    }
    line.stand_in.link_user_rich_menu(&on_b, &b);

    // A→B and B→C at once: A's users end on B, B's on C.
    line.stand_in.set_rich_menu_batch_polls(3);
    let chain = json!({"operations": [{"type": "link", "from": a, "to": b}, {"type": "link", "from": b, "to": c}],
                       "resumeRequestKey": "move-1"});
    line.stand_in.fail_next_rich_menu_batch_runs(1);
    let accepted = line.post_json("/v2/bot/richmenu/batch", &chain).await;
    assert_eq!(accepted.status, 202);
    let progress = format!("/v2/bot/richmenu/progress/batch?requestId={}", accepted.request_id());
    for _ in 0..2 {
        assert_eq!(line.get(&progress).await.body["phase"], "ongoing");
    }
    // The third poll completes it, failed: half of its five users moved.
    assert_eq!(line.get(&progress).await.body["phase"], "failed");
    let links = line.stand_in.user_rich_menus();
    let moved = links
        .iter()
        .filter(|(user, menu)| *menu != if **user == on_b { &b } else { &a })
        .count();
    assert_eq!(moved, 2, "{links:?}");

    // The same key again: only the users not yet processed move.
    line.stand_in.set_rich_menu_batch_polls(0);
    let resumed = line.post_json("/v2/bot/richmenu/batch", &chain).await;
    assert_eq!(resumed.status, 202);
    let progress = format!("/v2/bot/richmenu/progress/batch?requestId={}", resumed.request_id());
    assert_eq!(line.get(&progress).await.body["phase"], "succeeded");
    for user in &on_a {
        assert_eq!(
            line.stand_in.user_rich_menu(user),
            Some(b.clone()),
            "{user} moved once, A→B"
        );
    }
    assert_eq!(line.stand_in.user_rich_menu(&on_b), Some(c.clone()));

    // LINE allows 3 batches an hour; a batch while another is ongoing is not refused.
    line.stand_in.set_rich_menu_batch_polls(DEFAULT_BATCH_POLLS);
    let unlink_c = json!({"operations": [{"type": "unlink", "from": c}]});
    assert_eq!(line.post_json("/v2/bot/richmenu/batch", &unlink_c).await.status, 202);
    let limited = line.post_json("/v2/bot/richmenu/batch", &unlink_c).await;
    assert_eq!(limited.status, 429);
    line.stand_in.set_rich_menu_rate_limits(false);
    assert_eq!(line.post_json("/v2/bot/richmenu/batch", &unlink_c).await.status, 202);
    let phases: Vec<BatchPhase> = line
        .stand_in
        .rich_menu_batches()
        .iter()
        .map(|batch| batch.phase)
        .collect();
    assert_eq!(
        phases,
        [
            BatchPhase::Failed,
            BatchPhase::Succeeded,
            BatchPhase::Ongoing,
            BatchPhase::Ongoing
        ]
    );
    assert_eq!(BatchPhase::Ongoing.as_str(), "ongoing");
    line.stand_in.complete_rich_menu_batches();
    assert_eq!(line.stand_in.user_rich_menu(&on_b), None);
    assert!(
        line.stand_in
            .rich_menu_batches()
            .iter()
            .all(|batch| batch.phase != BatchPhase::Ongoing)
    );
}

/// Runs check_requests.py on `calls`: whether it passed, and its report.
pub(crate) fn check_requests(shared: &std::path::Path, calls: &Value) -> (bool, String) {
    let file = std::env::temp_dir().join(format!("rich-menu-calls-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, serde_json::to_vec_pretty(calls).unwrap()).unwrap();
    let checker = crate::helpers::repo_path("tests/contract/check_requests.py");
    let output = std::process::Command::new("python3")
        .arg(&checker)
        .arg(shared)
        .arg(&file)
        .output()
        .expect("python3 runs");
    std::fs::remove_file(file).unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), report)
}

#[tokio::test]
async fn the_recorded_bodies_match_lines_schemas_and_the_checker_catches_a_broken_one() {
    let Some(shared) = crate::contract::shared_dir() else {
        return;
    };
    let line = Line::start().await;
    let users = [new_user(), new_user()];
    let old = line.menu_with_image(&member_menu("old")).await;
    let new = line.menu_with_image(&member_menu("new")).await;
    let alias = json!({"richMenuAliasId": "survey_tab", "richMenuId": old});
    line.post_json("/v2/bot/richmenu/alias", &alias).await;
    line.post_json("/v2/bot/richmenu/alias/survey_tab", &json!({"richMenuId": new}))
        .await;
    line.post_json(
        "/v2/bot/richmenu/bulk/link",
        &json!({"richMenuId": old, "userIds": users}),
    )
    .await;
    line.post_json("/v2/bot/richmenu/bulk/unlink", &json!({"userIds": [users[1]]}))
        .await;
    let batch = json!({"operations": [{"type": "link", "from": old, "to": new}], "resumeRequestKey": "k-1"});
    assert_eq!(line.post_json("/v2/bot/richmenu/batch", &batch).await.status, 202);
    let calls = line.stand_in.rich_menu_calls_for_contract();
    assert_eq!(calls.as_array().unwrap().len(), 7);
    let (ok, report) = check_requests(&shared, &calls);
    assert!(ok && report.contains("7 request bodies, 0 schema problems"), "{report}");

    // Guards against a checker that passes everything.
    let mut broken = calls.clone();
    broken[0]["body"]["chatBarText"] = json!("a chat bar text too long");
    broken[2]["body"]["richMenuAliasId"] = json!("Survey Tab");
    broken[6]["body"]["operations"][0].as_object_mut().unwrap().remove("to");
    let (ok, report) = check_requests(&shared, &broken);
    assert!(!ok, "{report}");
    assert!(
        report.contains("chatBarText: longer than 14")
            && report.contains("'Survey Tab' does not match")
            && report.contains("missing to")
            && report.contains("3 schema problems"),
        "{report}"
    );
}
