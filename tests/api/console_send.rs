//! A manual send from the console (issue 27 §3): from a user's page, an
//! editor picks a scenario, sees what it will send that user (rendered for
//! them), and confirms; the form carries its own key, so a double click and
//! a resent form reach LINE once. Viewers cannot; the send is audited.

use crate::helpers::browser::Browser;
use crate::helpers::{events, spawn_app};
use crate::operator_access::{EDITOR, PASSWORD, VIEWER, add_staff, get, session};

/// The hidden fields of the confirm form on a preview page.
fn confirm_fields(page: &str) -> Vec<(String, String)> {
    let form = page.split("action=\"/console/users/send\"").nth(1).unwrap_or_default();
    form.split("<input type=\"hidden\" ")
        .skip(1)
        .filter_map(|input| {
            let name = input.split("name=\"").nth(1)?.split('"').next()?;
            let value = input.split("value=\"").nth(1)?.split('"').next()?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect()
}

#[tokio::test]
async fn an_editor_sends_a_scenario_to_one_user_once_however_often_the_form_is_sent() {
    let app = spawn_app().await;
    add_staff(&app);
    let user = events::new_user();
    let editor = session(&app.address, EDITOR).await;
    let pushes = || {
        app.line
            .accepted()
            .into_iter()
            .filter(|call| call.to() == Some(user.as_str()))
            .count()
    };

    // The user's page offers the send to an editor; the choice lists the scenarios.
    let page = get(&app.address, &format!("/console/users?id={user}"), &editor)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("id=\"send-scenario\""));
    let choice = get(&app.address, &format!("/console/users/send?id={user}"), &editor).await;
    assert_eq!(choice.status(), 200);
    assert!(choice.text().await.unwrap().contains("<option value=\"news\""));
    // The preview shows what the user will get, and sends nothing yet.
    let preview = get(
        &app.address,
        &format!("/console/users/send?id={user}&scenario=news"),
        &editor,
    )
    .await;
    assert_eq!(preview.status(), 200);
    let preview = preview.text().await.unwrap();
    assert!(
        preview.contains("Today&#39;s news: the cafeteria has a new menu.")
            || preview.contains("Today's news: the cafeteria has a new menu."),
        "{preview}"
    );
    assert_eq!(pushes(), 0);

    // The confirm form sent three times at once (a double click and a
    // resubmitted page): one push.
    let fields = confirm_fields(&preview);
    assert_eq!(
        fields.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(),
        ["csrf", "user", "scenario", "key"]
    );
    let body = serde_urlencoded::to_string(&fields).unwrap();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let send = || {
        client
            .post(format!("{}/console/users/send", app.address))
            .header("Cookie", &editor)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body.clone())
            .send()
    };
    let (one, two, three) = tokio::join!(send(), send(), send());
    for response in [one, two, three] {
        let response = response.unwrap();
        assert_eq!(response.status(), 200);
        let page = response.text().await.unwrap();
        assert!(
            page.contains("Sent news") || page.contains("already by this form"),
            "{page}"
        );
    }
    assert_eq!(pushes(), 1, "one push however often the form is sent");
    let again = send().await.unwrap().text().await.unwrap();
    assert!(again.contains("already by this form"), "{again}");
    assert_eq!(pushes(), 1);

    // A viewer is refused, even with a valid form of their own session.
    let viewer = session(&app.address, VIEWER).await;
    assert_eq!(
        get(&app.address, &format!("/console/users/send?id={user}"), &viewer)
            .await
            .status(),
        403
    );
    // A made-up key is refused: only the preview makes one.
    let mut forged = fields.clone();
    forged[3].1 = "my-own-key".into();
    let refused = client
        .post(format!("{}/console/users/send", app.address))
        .header("Cookie", &editor)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(&forged).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    assert_eq!(pushes(), 1);

    // LINE failing for a moment: the send is recorded and retried by the
    // service, and the page says not to send it again.
    let later = events::new_user();
    app.line
        .fail_next_pushes([crate::helpers::line_stand_in::Fault::RateLimit { retry_after_secs: 1 }]);
    let preview = get(
        &app.address,
        &format!("/console/users/send?id={later}&scenario=news"),
        &editor,
    )
    .await
    .text()
    .await
    .unwrap();
    let queued = client
        .post(format!("{}/console/users/send", app.address))
        .header("Cookie", &editor)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(confirm_fields(&preview)).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 202);
    assert!(queued.text().await.unwrap().contains("do not send it again"));
    let later_pushes = || {
        app.line
            .accepted()
            .into_iter()
            .filter(|call| call.to() == Some(later.as_str()))
            .count()
    };
    crate::helpers::wait_until(std::time::Duration::from_secs(30), || later_pushes() == 1).await;

    // Audited: one entry per submission, by the editor, via the console.
    let entries = app.firestore.list("audit_log").await;
    let sends: Vec<_> = entries
        .iter()
        .filter(|entry| entry["fields"]["action"]["stringValue"] == "manual_send")
        .collect();
    assert_eq!(sends.len(), 5, "three at once, one resent, one queued");
    assert!(
        sends
            .iter()
            .all(|entry| entry["fields"]["operator"]["stringValue"] == EDITOR
                && entry["fields"]["via"]["stringValue"] == "console"
                && entry["fields"]["result"]["stringValue"] == "done")
    );
}

/// The preview is what that user would get: their LINE display name fills
/// `{name|お客さま}`, and a user LINE does not name gets the fallback.
#[tokio::test]
async fn the_preview_is_rendered_for_the_user_it_goes_to() {
    let app = crate::personal::app().await;
    add_staff(&app);
    let editor = session(&app.address, EDITOR).await;
    let named = events::new_user();
    app.line.set_profile(&named, "太郎");
    let unnamed = events::new_user();
    let preview = |user: String| {
        let (address, editor) = (app.address.clone(), editor.clone());
        async move {
            let page = get(
                &address,
                &format!("/console/users/send?id={user}&scenario=greet"),
                &editor,
            )
            .await;
            assert_eq!(page.status(), 200);
            page.text().await.unwrap()
        }
    };
    let page = preview(named.clone()).await;
    assert!(page.contains("太郎さん、友だち追加ありがとうございます。"), "{page}");
    assert!(page.contains("太郎さんのご利用プランは？"), "{page}");
    assert!(!page.contains("お客さま"), "{page}");
    let page = preview(unnamed).await;
    assert!(
        page.contains("お客さまさん、友だち追加ありがとうございます。"),
        "{page}"
    );
    assert!(app.line.accepted().is_empty(), "a preview sends nothing");
}

#[tokio::test]
async fn a_double_click_on_the_confirm_button_in_a_real_browser_sends_once() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = spawn_app().await;
    add_staff(&app);
    let user = events::new_user();
    browser.goto(&format!("{}/console/login", app.address)).await;
    browser.fill("#email", EDITOR).await;
    browser.fill("#password", PASSWORD).await;
    browser.click("#sign-in").await;
    assert_eq!(browser.wait_for_path("/console").await, "/console");
    browser.goto(&format!("{}/console/users?id={user}", app.address)).await;
    browser.click("#send-scenario").await;
    browser.wait_for("#preview").await;
    browser.screenshot("send-choice").await;
    browser
        .run("document.querySelector('#scenario').value = 'news'; return true")
        .await;
    browser.click("#preview").await;
    browser.wait_for("#confirm-send").await;
    browser.screenshot("send-preview").await;
    assert!(
        browser
            .text_of("#preview-messages")
            .await
            .contains("the cafeteria has a new menu")
    );
    // The form as the page holds it, for a resubmission after the clicks.
    let form = browser
        .run("return new URLSearchParams(new FormData(document.querySelector('#confirm-send').form)).toString()")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    browser
        .run("const button = document.querySelector('#confirm-send'); button.click(); button.click(); return true")
        .await;
    browser.wait_for("#back-to-user").await;
    browser.screenshot("send-result").await;
    // The browser sends the form again (what a reload of the result does).
    let status = browser
        .run(&format!(
            "return fetch('/console/users/send', {{method: 'POST', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {form:?}}}).then(r => r.status)"
        ))
        .await;
    assert_eq!(status.as_u64(), Some(200));
    let pushes = app
        .line
        .accepted()
        .into_iter()
        .filter(|call| call.to() == Some(user.as_str()))
        .count();
    assert_eq!(pushes, 1);
    browser.client.clone().close().await.expect("the browser closes");
}
