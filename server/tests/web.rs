//! What a browser sees: CORS and static files.

mod common;

use common::{send, Desk, TICKET};
use oncekey_server::Config;

fn cors_preflight(desk: &Desk, origin: &str) -> reqwest::RequestBuilder {
    desk.client
        .request(reqwest::Method::OPTIONS, desk.url("/api/tickets"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "idempotency-key,content-type,x-tenant,x-fault",
        )
}

#[tokio::test]
async fn loopback_origins_may_send_the_key_and_read_the_replay_header() {
    let desk = Desk::start("cors").await;
    for origin in ["http://127.0.0.1:8123", "http://localhost:3000"] {
        let response = cors_preflight(&desk, origin).send().await.unwrap();
        assert!(response.status().is_success());
        let headers = response.headers();
        assert_eq!(headers["access-control-allow-origin"], origin);
        let allowed = headers["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase();
        for h in ["idempotency-key", "content-type", "x-tenant", "x-fault"] {
            assert!(allowed.contains(h), "{allowed}");
        }
    }
    let response = desk
        .post(Some("k-cors"), TICKET)
        .header("Origin", "http://127.0.0.1:8123")
        .send()
        .await
        .unwrap();
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("idempotent-replayed") && exposed.contains("retry-after"));
}

#[tokio::test]
async fn other_origins_are_not_allowed_by_default() {
    let desk = Desk::start("cors-foreign").await;
    let response = cors_preflight(&desk, "http://evil.example:80")
        .send()
        .await
        .unwrap();
    assert!(response
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

#[tokio::test]
async fn configured_origins_replace_the_default() {
    let config = Config {
        cors_origins: vec!["http://app.test:9000".into()],
        ..Config::default()
    };
    let desk = Desk::with("cors-configured", config).await;
    let ok = cors_preflight(&desk, "http://app.test:9000")
        .send()
        .await
        .unwrap();
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "http://app.test:9000"
    );
    let loopback = cors_preflight(&desk, "http://127.0.0.1:1")
        .send()
        .await
        .unwrap();
    assert!(loopback
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

#[tokio::test]
async fn static_folders_are_served_with_the_right_types() {
    let root = tempfile::tempdir().unwrap();
    let www = root.path().join("www");
    let pkg = root.path().join("pkg");
    let pages = root.path().join("pages");
    for dir in [&www, &pkg, &pages] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::write(www.join("index.html"), "<h1>Help desk</h1>").unwrap();
    std::fs::write(pkg.join("oncekey_bg.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::write(pkg.join("oncekey.js"), "export {}").unwrap();
    std::fs::write(pages.join("form.html"), "<form></form>").unwrap();
    let config = Config {
        www: Some(www),
        pkg: Some(pkg),
        mounts: vec![("/pages".into(), pages)],
        ..Config::default()
    };
    let desk = Desk::with("static", config).await;
    let get = |path: &str| desk.client.get(desk.url(path)).send();
    let index = get("/").await.unwrap();
    assert_eq!(index.headers()["content-type"], "text/html");
    assert_eq!(index.text().await.unwrap(), "<h1>Help desk</h1>");
    let wasm = get("/pkg/oncekey_bg.wasm").await.unwrap();
    assert_eq!(wasm.headers()["content-type"], "application/wasm");
    assert_eq!(wasm.bytes().await.unwrap().as_ref(), b"\0asm\x01\0\0\0");
    let js = get("/pkg/oncekey.js").await.unwrap();
    let js_type = js.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(js_type.contains("javascript"), "{js_type}");
    let page = get("/pages/form.html").await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(get("/nothing-here").await.unwrap().status(), 404);
    // The API still answers next to the static folders.
    assert_eq!(send(desk.post(Some("k-static"), TICKET)).await.status, 201);
}
