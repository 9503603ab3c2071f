//! The admin listener: JSON API over the live state. It binds to loopback only (validation
//! refuses any other address until authentication exists), changes are POST-only, and a POST
//! from a browser page of another origin is refused, so a web page cannot drive the balancer.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::app::App;
use crate::stats;

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/api/stats", get(get_stats))
        .route("/metrics", get(metrics))
        .route("/api/reload", post(reload))
        .layer(middleware::from_fn(same_origin_only))
        .with_state(app)
}

pub async fn serve(listener: tokio::net::TcpListener, app: Arc<App>) {
    let stop = app.shutdown.stopping().clone();
    let router = router(app);
    if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(async move { stop.cancelled().await }).await {
        tracing::error!("admin listener failed: {e}");
    }
}

async fn get_stats(State(app): State<Arc<App>>) -> Json<stats::Snapshot> {
    Json(stats::snapshot(&app.runtime.current()))
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let body = stats::prometheus::render(&stats::snapshot(&app.runtime.current()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

async fn reload(State(app): State<Arc<App>>) -> Response {
    match app.reload().await {
        Ok(msg) => Json(json!({ "ok": true, "message": msg })).into_response(),
        Err(msg) => (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({ "ok": false, "error": msg }))).into_response(),
    }
}

/// Refuses state-changing requests whose `Origin` (sent by browsers) is not this admin listener.
async fn same_origin_only(req: Request, next: Next) -> Response {
    if req.method() != Method::GET && req.method() != Method::HEAD && !same_origin(req.headers()) {
        return (StatusCode::FORBIDDEN, Json(json!({ "ok": false, "error": "cross-origin request refused" }))).into_response();
    }
    next.run(req).await
}

fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let origin = origin.to_str().unwrap_or("");
    let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
    !host.is_empty() && origin_host == host
}
