//! Users found in the console by display name or tag (issue 27 §4): a name
//! matches by its start, a tag exactly; at most 50 are listed, each linked
//! to their page; what is shown is escaped, and a bad search is 400.

use crate::helpers::events;
use crate::helpers::spawn_app;
use crate::operator_access::{VIEWER, add_staff, get, session};
use serde_json::{Value, json};

fn user_doc(user: &str, name: Option<&str>, tags: &[&str]) -> (String, String, Value) {
    let mut fields = json!({
        "lineUserId": {"stringValue": user},
        "following": {"booleanValue": true},
        "lastSeenMs": {"integerValue": "1790001600000"},
        "tags": {"arrayValue": {"values": tags.iter().map(|tag| json!({"stringValue": tag})).collect::<Vec<_>>()}},
    });
    if let Some(name) = name {
        fields["displayName"] = json!({"stringValue": name});
    }
    ("users".to_owned(), user.to_owned(), fields)
}

fn rows(page: &str) -> Vec<String> {
    page.split("<tr data-user=\"")
        .skip(1)
        .filter_map(|row| row.split('"').next().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn users_are_found_by_the_start_of_their_name_or_by_a_tag() {
    let app = spawn_app().await;
    add_staff(&app);
    let (taro, hanako, yamada, marked) = (
        events::new_user(),
        events::new_user(),
        events::new_user(),
        events::new_user(),
    );
    let mut documents = vec![
        user_doc(&taro, Some("田中 太郎"), &["常連"]),
        user_doc(&hanako, Some("田中 花子"), &[]),
        user_doc(&yamada, Some("山田 田中"), &["常連", "vip"]),
        user_doc(&marked, Some("<b>太字</b>"), &[]),
    ];
    // 51 more regulars: the list stops at 50 and says there are more.
    let crowd: Vec<String> = (0..51).map(|_| events::new_user()).collect();
    documents.extend(crowd.iter().map(|user| user_doc(user, None, &["ランチ常連"])));
    app.firestore.write_all(&documents).await;
    let viewer = session(&app.address, VIEWER).await;
    let search = |q: &str, by: &str| {
        let path = format!(
            "/console/users?{}",
            serde_urlencoded::to_string([("q", q), ("by", by)]).unwrap()
        );
        let viewer = viewer.clone();
        let address = app.address.clone();
        async move {
            let response = get(&address, &path, &viewer).await;
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };

    let (status, page) = search("田中", "name").await;
    assert_eq!(status, 200);
    let mut found = rows(&page);
    found.sort();
    let mut expected = vec![taro.clone(), hanako.clone()];
    expected.sort();
    assert_eq!(found, expected, "the start of the name, not a word inside it");
    assert!(page.contains(&format!("href=\"/console/users?id={taro}\"")));
    assert_eq!(rows(&search("田中 花", "name").await.1), vec![hanako.clone()]);

    let (_, page) = search("常連", "tag").await;
    let mut found = rows(&page);
    found.sort();
    let mut expected = vec![taro.clone(), yamada.clone()];
    expected.sort();
    assert_eq!(found, expected, "the tag exactly, not a tag containing it");

    let (_, page) = search("ランチ常連", "tag").await;
    assert_eq!(rows(&page).len(), 50);
    assert!(page.contains("id=\"more-found\""));

    let (_, page) = search("<b>", "name").await;
    assert_eq!(rows(&page), vec![marked.clone()]);
    assert!(page.contains("&lt;b&gt;太字&lt;/b&gt;") && !page.contains("<b>太字"));

    let (_, page) = search("誰も", "name").await;
    assert!(page.contains("id=\"none-found\""));
    assert_eq!(search(&"x".repeat(101), "tag").await.0, 400);
    assert_eq!(search("田中", "phone").await.0, 400);
    assert_eq!(search("a\0b", "name").await.0, 400);
}
