//! The JSON API: reads of the live state, and one route per `Change`.

use std::fmt::Display;
use std::sync::Arc;

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::refuse;
use crate::app::App;
use crate::config::{self, Algorithm, Change, Diagnostics, Health, ServerAdmin, ServiceSettings};
use crate::stats;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/api/stats", get(get_stats))
        .route("/api/stats.csv", get(get_csv))
        .route("/metrics", get(metrics))
        .route("/api/history", get(history))
        .route("/api/config", get(get_config).post(put_config))
        .route("/api/config/validate", post(validate_config))
        .route("/api/save", post(save))
        .route("/api/reload", post(reload))
        .route("/api/services/{service}/servers", post(add_server))
        .route("/api/services/{service}/servers/{address}", axum::routing::delete(remove_server))
        .route("/api/services/{service}/servers/{address}/state", post(server_state))
        .route("/api/services/{service}/servers/{address}/weight", post(weight))
        .route("/api/services/{service}/algorithm", post(algorithm))
        .route("/api/services/{service}/health", post(health))
        .route("/api/services/{service}/settings", post(settings))
        .route("/api/services/{service}/start", post(start))
        .route("/api/services/{service}/stop", post(stop))
}

/// A JSON request body; a body that does not parse is refused in the API's own error format,
/// with serde's words for what is wrong (`unknown variant`, `missing field`...).
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) => Err(refuse(e.status(), e.body_text())),
        }
    }
}

/// The answer to a change: 200 with the message, or 422 with why it was refused.
fn answer(result: Result<String, impl Display>) -> Response {
    match result {
        Ok(message) => Json(json!({ "ok": true, "message": message })).into_response(),
        Err(error) => refuse(StatusCode::UNPROCESSABLE_ENTITY, error.to_string()),
    }
}

async fn get_stats(State(app): State<Arc<App>>) -> Json<stats::Snapshot> {
    Json(stats::snapshot(&app.runtime.current()))
}

async fn get_csv(State(app): State<Arc<App>>) -> Response {
    let body = stats::csv(&stats::snapshot(&app.runtime.current()));
    ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], body).into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let body = stats::prometheus::render(&stats::snapshot(&app.runtime.current()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

#[derive(Deserialize)]
struct HistoryQuery {
    service: Option<String>,
    #[serde(default)]
    since: u64,
}

async fn history(State(app): State<Arc<App>>, Query(q): Query<HistoryQuery>) -> Response {
    let series = app.history.get(q.service.as_deref(), q.since);
    Json(json!({ "interval_secs": stats::history::INTERVAL.as_secs(), "series": series })).into_response()
}

async fn get_config(State(app): State<Arc<App>>) -> Response {
    let config = app.runtime.current().config.clone();
    Json(json!({ "toml": config::to_toml(&config), "config": config, "file": app.path.as_ref().map(|p| p.display().to_string()) })).into_response()
}

#[derive(Deserialize)]
struct ConfigBody {
    toml: String,
}

/// Why a config sent by the API was not taken.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("config refused, the running config stays:\n{0}")]
    Refused(Diagnostics),
    /// The parse did not finish (it panicked, or the runtime is shutting down).
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// Parses a whole config sent by the API, with line/column errors against the text sent.
async fn parse_body(body: ConfigBody) -> Result<config::Config, BodyError> {
    tokio::task::spawn_blocking(move || config::parse(&body.toml, "request")).await?.map_err(BodyError::Refused)
}

async fn validate_config(Body(body): Body<ConfigBody>) -> Response {
    answer(parse_body(body).await.map(|c| format!("valid: {} services", c.services.len())))
}

async fn put_config(State(app): State<Arc<App>>, Body(body): Body<ConfigBody>) -> Response {
    match parse_body(body).await {
        Ok(c) => answer(app.change(Change::Replace(Box::new(c))).await),
        Err(e) => answer(Err::<String, _>(e)),
    }
}

async fn save(State(app): State<Arc<App>>) -> Response {
    answer(app.save().await)
}

async fn reload(State(app): State<Arc<App>>) -> Response {
    answer(app.reload().await)
}

#[derive(Deserialize)]
struct StateBody {
    state: ServerAdmin,
}

async fn server_state(State(app): State<Arc<App>>, Path((service, address)): Path<(String, String)>, Body(b): Body<StateBody>) -> Response {
    answer(app.change(Change::ServerState { service, address, state: b.state }).await)
}

#[derive(Deserialize)]
struct WeightBody {
    weight: u32,
}

async fn weight(State(app): State<Arc<App>>, Path((service, address)): Path<(String, String)>, Body(b): Body<WeightBody>) -> Response {
    answer(app.change(Change::Weight { service, address, weight: b.weight }).await)
}

async fn add_server(State(app): State<Arc<App>>, Path(service): Path<String>, Body(server): Body<config::Server>) -> Response {
    answer(app.change(Change::AddServer { service, server }).await)
}

async fn remove_server(State(app): State<Arc<App>>, Path((service, address)): Path<(String, String)>) -> Response {
    answer(app.change(Change::RemoveServer { service, address }).await)
}

#[derive(Deserialize)]
struct AlgorithmBody {
    algorithm: Algorithm,
}

async fn algorithm(State(app): State<Arc<App>>, Path(service): Path<String>, Body(b): Body<AlgorithmBody>) -> Response {
    answer(app.change(Change::Algorithm { service, algorithm: b.algorithm }).await)
}

async fn health(State(app): State<Arc<App>>, Path(service): Path<String>, Body(health): Body<Health>) -> Response {
    answer(app.change(Change::Health { service, health }).await)
}

async fn settings(State(app): State<Arc<App>>, Path(service): Path<String>, Body(settings): Body<ServiceSettings>) -> Response {
    answer(app.change(Change::Settings { service, settings }).await)
}

async fn start(State(app): State<Arc<App>>, Path(service): Path<String>) -> Response {
    answer(app.change(Change::ServiceEnabled { service, enabled: true }).await)
}

async fn stop(State(app): State<Arc<App>>, Path(service): Path<String>) -> Response {
    answer(app.change(Change::ServiceEnabled { service, enabled: false }).await)
}
