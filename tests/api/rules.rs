//! `firestore.rules` denies every client: only the server's admin access works.

use crate::helpers::emulator_host;
use crate::helpers::firestore_rest::FirestoreRest;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn with_the_rules_loaded_an_unauthenticated_client_can_neither_read_nor_write() {
    let project = crate::helpers::new_project_id();
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    firestore
        .create_with_random_id("survey_responses", &[("scenarioId", "lunch")])
        .await;
    let document = firestore.list("survey_responses").await.remove(0);
    let id = document["name"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let write = json!({"fields": {"value": {"stringValue": "forged"}}});

    // Without rules the emulator is open: the checks below can fail.
    let open = firestore
        .unauthenticated(Method::GET, &format!("survey_responses/{id}"), None)
        .await;
    assert_eq!(open, StatusCode::OK);

    let rules = std::fs::read_to_string(crate::helpers::repo_path("firestore.rules")).unwrap();
    firestore.load_rules(&rules).await;

    for collection in [
        "survey_responses",
        "users",
        "scenario_answers",
        "webhook_inbox",
        "anything",
    ] {
        let read = firestore
            .unauthenticated(Method::GET, &format!("{collection}/{id}"), None)
            .await;
        let list = firestore.unauthenticated(Method::GET, collection, None).await;
        let create = firestore
            .unauthenticated(Method::POST, collection, Some(write.clone()))
            .await;
        let update = firestore
            .unauthenticated(Method::PATCH, &format!("{collection}/{id}"), Some(write.clone()))
            .await;
        let delete = firestore
            .unauthenticated(Method::DELETE, &format!("{collection}/{id}"), None)
            .await;
        for (what, status) in [
            ("read", read),
            ("list", list),
            ("create", create),
            ("update", update),
            ("delete", delete),
        ] {
            assert_eq!(status, StatusCode::FORBIDDEN, "{what} on {collection}");
        }
    }
    // The server's admin access is unaffected, and nothing was changed.
    let survivor = firestore.get("survey_responses", &id).await.expect("still there");
    assert_eq!(survivor["fields"], document["fields"]);
}
