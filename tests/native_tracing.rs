//! Each attempt is a `tracing` span with the key's short form, the attempt's number and its
//! outcome. In a test binary of its own: tracing caches a call site's interest process-wide, so a
//! test running without a subscriber on another thread could hide the spans from this one.
#![cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]

mod support;

use std::sync::Arc;

use support::*;

#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn each_attempt_is_a_tracing_span_with_the_short_key_its_number_and_outcome() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = Server::start();
    let tenant = tenant("tracing");
    let plan = Plan::new();
    plan.fault("t", 1, "fail-before");
    let client = client(&plan);
    let s = rt.block_on(send(&client, &server, &tenant, "t")).unwrap();
    assert_eq!(s.attempts(), 2);
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let short = s.key().short();
    let closes: Vec<&str> = log.lines().filter(|l| l.contains("close")).collect();
    assert_eq!(closes.len(), 2, "{log}");
    assert!(closes[0].contains("oncekey.attempt"), "{log}");
    assert!(
        closes[0].contains(&format!("key=\"{short}\""))
            || closes[0].contains(&format!("key={short}")),
        "{log}"
    );
    assert!(
        closes[0].contains("attempt=1") && closes[0].contains("503 retry"),
        "{log}"
    );
    assert!(
        closes[1].contains("attempt=2") && closes[1].contains("201 succeeded"),
        "{log}"
    );
}
