//! Reads the emulator over its REST API to count effects. Independent of the
//! service's own Firestore code, so a bug there cannot hide itself here.

use serde_json::Value;

pub struct FirestoreRest {
    http: reqwest::Client,
    /// `http://HOST/v1/projects/P/databases/(default)/documents`
    documents: String,
    emulator: String,
    project: String,
}

impl FirestoreRest {
    pub fn new(emulator_host: &str, project: &str) -> Self {
        Self::in_database(emulator_host, project, "(default)")
    }

    /// A named database of the project (`FIRESTORE_DATABASE`).
    pub fn in_database(emulator_host: &str, project: &str, database: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            documents: format!("http://{emulator_host}/v1/projects/{project}/databases/{database}/documents"),
            emulator: format!("http://{emulator_host}"),
            project: project.to_owned(),
        }
    }

    /// The ids of every top-level collection holding documents.
    pub async fn collections(&self) -> Vec<String> {
        let response: Value = self
            .http
            .post(format!("{}:listCollectionIds", self.documents))
            .bearer_auth("owner")
            .json(&serde_json::json!({ "pageSize": 100 }))
            .send()
            .await
            .expect("emulator reachable")
            .json()
            .await
            .expect("emulator answers JSON");
        response["collectionIds"]
            .as_array()
            .map(|ids| ids.iter().filter_map(|id| id.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// Every stored document of every collection, as one string: for "this text
    /// is stored nowhere" checks.
    pub async fn dump(&self) -> String {
        let mut all = String::new();
        for collection in self.collections().await {
            for document in self.list(&collection).await {
                all.push_str(&document.to_string());
                all.push('\n');
            }
        }
        all
    }

    /// Every document of a collection (as the admin: `Bearer owner`).
    ///
    /// Read as queries ordered by name, each starting after the last document
    /// of the one before, not with `documents.list`: the emulator answers a
    /// list page with at most 150 documents and scans the collection for each
    /// one, so listing 25,000 documents took 105 s, and these pages of 5,000
    /// take under 3 s.
    pub async fn list(&self, collection: &str) -> Vec<Value> {
        const PAGE: usize = 5_000;
        let (parent, collection_id) = match collection.rsplit_once('/') {
            Some((parent, id)) => (format!("{}/{parent}", self.documents), id),
            None => (self.documents.clone(), collection),
        };
        let mut documents: Vec<Value> = Vec::new();
        loop {
            let mut query = serde_json::json!({
                "from": [{ "collectionId": collection_id }],
                "orderBy": [{ "field": { "fieldPath": "__name__" } }],
                "limit": PAGE,
            });
            if let Some(last) = documents.last() {
                query["startAt"] =
                    serde_json::json!({ "values": [{ "referenceValue": last["name"] }], "before": false });
            }
            let response: Vec<Value> = self
                .http
                .post(format!("{parent}:runQuery"))
                .bearer_auth("owner")
                .json(&serde_json::json!({ "structuredQuery": query }))
                .send()
                .await
                .expect("emulator reachable")
                .json()
                .await
                .expect("emulator answers JSON");
            let before = documents.len();
            documents.extend(
                response
                    .into_iter()
                    .filter_map(|result| result.get("document").cloned()),
            );
            if documents.len() - before < PAGE {
                return documents;
            }
        }
    }

    /// Documents of `collection` whose `state` is `state`.
    pub async fn in_state(&self, collection: &str, state: &str) -> Vec<Value> {
        self.list(collection)
            .await
            .into_iter()
            .filter(|document| string_field(document, "state").as_deref() == Some(state))
            .collect()
    }

    /// Waits until no inbox event and no ledger action is pending; panics with
    /// what is still pending after `limit`.
    pub async fn settled(&self, limit: std::time::Duration) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let events = self.in_state("webhook_inbox", "pending").await;
            let actions = self.in_state("outbound_ledger", "pending").await;
            if events.is_empty() && actions.is_empty() {
                return;
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "still pending after {limit:?}: {} events, {} actions: {events:?} {actions:?}",
                    events.len(),
                    actions.len()
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    pub async fn count(&self, collection: &str) -> usize {
        self.list(collection).await.len()
    }

    /// Counts of every collection the service writes, for "nothing changed" checks.
    pub async fn counts(&self) -> [(String, usize); 4] {
        let mut counts: [(String, usize); 4] = Default::default();
        for (slot, collection) in
            counts
                .iter_mut()
                .zip(["survey_responses", "users", "scenario_answers", "webhook_inbox"])
        {
            *slot = (collection.to_owned(), self.count(collection).await);
        }
        counts
    }

    pub async fn get(&self, collection: &str, id: &str) -> Option<Value> {
        let response = self
            .http
            .get(format!("{}/{collection}/{id}", self.documents))
            .bearer_auth("owner")
            .send()
            .await
            .expect("emulator reachable");
        if response.status() == 404 {
            return None;
        }
        Some(response.json().await.expect("emulator answers JSON"))
    }

    /// Deletes one document (as the admin).
    pub async fn delete(&self, collection: &str, id: &str) {
        let status = self
            .http
            .delete(format!("{}/{collection}/{id}", self.documents))
            .bearer_auth("owner")
            .send()
            .await
            .expect("emulator reachable")
            .status();
        assert!(status.is_success(), "deleting a document failed: {status}");
    }

    /// Creates a document with fields given as plain strings, under a random id.
    pub async fn create_with_random_id(&self, collection: &str, fields: &[(&str, &str)]) {
        let fields: serde_json::Map<String, Value> = fields
            .iter()
            .map(|(name, value)| (name.to_string(), serde_json::json!({ "stringValue": value })))
            .collect();
        let status = self
            .http
            .post(format!("{}/{collection}", self.documents))
            .bearer_auth("owner")
            .json(&serde_json::json!({ "fields": fields }))
            .send()
            .await
            .expect("emulator reachable")
            .status();
        assert!(status.is_success(), "creating a document failed: {status}");
    }

    /// Sets `fields` (REST values, e.g. `{"integerValue": "3"}`) on a document,
    /// creating it if needed; other fields stay.
    pub async fn patch(&self, collection: &str, id: &str, fields: &[(&str, Value)]) {
        let mask: Vec<(&str, &str)> = fields
            .iter()
            .map(|(name, _)| ("updateMask.fieldPaths", *name))
            .collect();
        let fields: serde_json::Map<String, Value> = fields
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect();
        let status = self
            .http
            .patch(format!("{}/{collection}/{id}", self.documents))
            .bearer_auth("owner")
            .query(&mask)
            .json(&serde_json::json!({ "fields": fields }))
            .send()
            .await
            .expect("emulator reachable")
            .status();
        assert!(status.is_success(), "patching a document failed: {status}");
    }

    /// Writes whole documents (`(collection, id, REST fields)`), 500 per
    /// `batchWrite` request, each on its own (not atomic): for seeding.
    pub async fn write_all(&self, documents: &[(String, String, Value)]) {
        let database = self.documents.trim_end_matches("/documents");
        let name_prefix = self.documents.trim_start_matches(&format!("{}/v1/", self.emulator));
        for chunk in documents.chunks(500) {
            let writes: Vec<Value> = chunk
                .iter()
                .map(|(collection, id, fields)| {
                    serde_json::json!({ "update": { "name": format!("{name_prefix}/{collection}/{id}"), "fields": fields } })
                })
                .collect();
            let status = self
                .http
                .post(format!("{database}/documents:batchWrite"))
                .bearer_auth("owner")
                .json(&serde_json::json!({ "writes": writes }))
                .send()
                .await
                .expect("emulator reachable")
                .status();
            assert!(status.is_success(), "seeding documents failed: {status}");
        }
    }

    /// Loads security rules for this project only (the emulator keeps rules per project).
    pub async fn load_rules(&self, rules: &str) {
        let status = self
            .http
            .put(format!(
                "{}/emulator/v1/projects/{}:securityRules",
                self.emulator, self.project
            ))
            .json(&serde_json::json!({"rules": {"files": [{"name": "firestore.rules", "content": rules}]}}))
            .send()
            .await
            .expect("emulator reachable")
            .status();
        assert!(status.is_success(), "loading rules failed: {status}");
    }

    /// A request as an unauthenticated client SDK would send it (no admin token).
    pub async fn unauthenticated(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::StatusCode {
        let mut request = self.http.request(method, format!("{}/{path}", self.documents));
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("emulator reachable").status()
    }
}

/// The strings of an array field in a REST document.
pub fn string_array(document: &Value, field: &str) -> Vec<String> {
    document["fields"][field]["arrayValue"]["values"]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(|value| value["stringValue"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The last path segment of a REST document's name.
pub fn document_id(document: &Value) -> String {
    document["name"]
        .as_str()
        .and_then(|name| name.rsplit('/').next())
        .unwrap_or_default()
        .to_owned()
}

pub fn string_field(document: &Value, field: &str) -> Option<String> {
    document["fields"][field]["stringValue"].as_str().map(str::to_owned)
}
