//! `GET /openapi.json` is an OpenAPI 3.1 document of the API, and the live
//! answers match the schemas it gives for them.

use crate::common::serve::Serve;
use serde_json::Value;

/// Checks `value` against `schema` (resolving `$ref`s in `doc`): types,
/// required properties, and no property the schema does not name.
fn conforms(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap();
        return conforms(doc, &doc["components"]["schemas"][name], value, at);
    }
    if let Some(options) = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Value::as_array) {
        return if options.iter().any(|o| conforms(doc, o, value, at).is_ok()) {
            Ok(())
        } else {
            Err(format!("{at}: {value} matches none of {options:?}"))
        };
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    let fits = types.iter().any(|t| match *t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => false,
    });
    if !fits {
        return Err(format!("{at}: {value} is not {types:?}"));
    }
    if let Value::Object(object) = value {
        let properties = schema["properties"].as_object().cloned().unwrap_or_default();
        for required in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !object.contains_key(required) {
                return Err(format!("{at}: {required} is required, missing in {value}"));
            }
        }
        for (key, item) in object {
            match properties.get(key) {
                Some(property) => conforms(doc, property, item, &format!("{at}.{key}"))?,
                None if schema.get("additionalProperties").is_some() => {
                    conforms(doc, &schema["additionalProperties"], item, &format!("{at}.{key}"))?
                }
                None => return Err(format!("{at}: {key} is not in the schema")),
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            conforms(doc, item_schema, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

fn response_schema<'d>(doc: &'d Value, path: &str, method: &str, status: u16) -> &'d Value {
    let schema = &doc["paths"][path][method]["responses"][status.to_string()]["content"]["application/json"]["schema"];
    assert!(!schema.is_null(), "no schema for {method} {path} {status}");
    schema
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_describes_the_live_answers() {
    let serve = Serve::start(None, &[], &[]).await;
    let r = serve.request("GET", "/openapi.json", &[], b"").await.unwrap();
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{}", doc["openapi"]);
    let attempt = "/v1/limits/{name}/attempt";
    for path in [attempt, "/v1/limits/{name}/reset", "/v1/limits", "/healthz"] {
        assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
    }
    let body = r#"{"keys": {"account": "doc@example.com", "ip": "192.0.2.70"}}"#;
    let mut seen = Vec::new();
    for _ in 0..6 {
        let r = serve.post("/v1/limits/sign-in/attempt", body).await;
        let schema = response_schema(&doc, attempt, "post", r.status);
        conforms(&doc, schema, &r.json(), "attempt").unwrap();
        seen.push(r.status);
    }
    assert_eq!(seen, [200, 200, 200, 200, 200, 429]);
    for (path, status, body) in [
        ("/v1/limits/nope/attempt", 404, body),
        ("/v1/limits/sign-in/attempt", 422, r#"{"keys": {"account": "a"}}"#),
        ("/v1/limits/sign-in/attempt", 400, "{"),
    ] {
        let r = serve.post(path, body).await;
        assert_eq!(r.status, status);
        conforms(&doc, response_schema(&doc, attempt, "post", status), &r.json(), path).unwrap();
    }
    let r = serve.request("GET", "/v1/limits", &[], b"").await.unwrap();
    conforms(&doc, response_schema(&doc, "/v1/limits", "get", 200), &r.json(), "list").unwrap();
    let r = serve.request("GET", "/healthz", &[], b"").await.unwrap();
    conforms(&doc, response_schema(&doc, "/healthz", "get", 200), &r.json(), "health").unwrap();
}

/// The document says how a token is sent (an HTTP bearer scheme, needed by
/// every route but `/healthz` when one is set), and the live 401 and 421
/// answers conform to what it says of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_describes_the_token_and_the_loopback_names() {
    let serve = Serve::start(None, &[], &[]).await;
    let doc = serve.request("GET", "/openapi.json", &[], b"").await.unwrap().json();
    assert_eq!(doc["components"]["securitySchemes"]["token"]["scheme"], "bearer", "{}", doc["components"]);
    assert_eq!(doc["security"], serde_json::json!([{}, {"token": []}]), "a token is optional");
    assert_eq!(doc["paths"]["/healthz"]["get"]["security"], serde_json::json!([{}]), "/healthz never needs it");
    let attempt = "/v1/limits/{name}/attempt";
    let body = r#"{"keys": {"client": "doc"}}"#;
    let foreign = format!(
        "POST /v1/limits/api/attempt HTTP/1.1\r\nhost: evil.example\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = crate::common::serve::raw(&serve.addr, foreign.as_bytes()).await;
    assert_eq!(r.status, 421);
    conforms(&doc, response_schema(&doc, attempt, "post", 421), &r.json(), "not loopback").unwrap();

    let token = "a-long-random-token-0123456789abcdef";
    let guarded = Serve::start(None, &[("LIMIT_STORE_API_TOKEN", token)], &[]).await;
    let r = guarded.post("/v1/limits/api/attempt", body).await;
    assert_eq!(r.status, 401);
    conforms(&doc, response_schema(&doc, attempt, "post", 401), &r.json(), "unauthorized").unwrap();
}
