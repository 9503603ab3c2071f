//! The JSON API: reads of the live state, and one route per `Change`.

use std::fmt::Display;
use std::sync::Arc;

use axum::extract::{Extension, FromRequest, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::{Control, Editor, refuse};
use crate::config::{self, Algorithm, Change, Diagnostics, Health, ServerAdmin, ServiceSettings};
use crate::stats;

pub fn routes<C: Control>() -> Router<Arc<C>> {
    Router::new()
        .route("/api/stats", get(get_stats::<C>))
        .route("/api/stats.csv", get(get_csv::<C>))
        .route("/api/fleet", get(fleet::<C>))
        .route("/api/algorithms", get(algorithms))
        .route("/metrics", get(metrics::<C>))
        .route("/api/history", get(history::<C>))
        .route("/api/explain", get(explain::<C>))
        .route("/api/explain/recent", get(explain_recent::<C>))
        .route("/api/limits", get(limits::<C>))
        .route("/api/limits/{table}", get(limit::<C>))
        .route("/api/limits/{table}/{key}", axum::routing::delete(clear_limit_key::<C>))
        .route("/api/config", get(get_config::<C>).post(put_config::<C>))
        .route("/api/config/validate", post(validate_config))
        .route("/api/save", post(save::<C>))
        .route("/api/reload", post(reload::<C>))
        .route("/api/audit", get(audit::<C>))
        .route("/api/upgrade", post(upgrade::<C>))
        .route("/api/services", post(add_service::<C>))
        .route("/api/services/{service}", axum::routing::delete(remove_service::<C>))
        .route("/api/services/{service}/servers", post(add_server::<C>))
        .route("/api/services/{service}/servers/{address}", axum::routing::delete(remove_server::<C>))
        .route("/api/services/{service}/servers/{address}/state", post(server_state::<C>))
        .route("/api/services/{service}/servers/{address}/weight", post(weight::<C>))
        .route("/api/services/{service}/servers/{address}/check", post(check_now::<C>))
        .route("/api/services/{service}/servers/{address}/inflight", get(inflight::<C>))
        .route("/api/services/{service}/algorithm", post(algorithm::<C>))
        .route("/api/services/{service}/health", post(health::<C>))
        .route("/api/services/{service}/settings", post(settings::<C>))
        .route("/api/services/{service}/routes", post(set_routes::<C>))
        .route("/api/services/{service}/start", post(start::<C>))
        .route("/api/services/{service}/stop", post(stop::<C>))
        // A shared pool's servers, by the pool's name (the service routes take it too: a pool
        // and a service never share a name).
        .route("/api/pools/{service}/servers", post(add_server::<C>))
        .route("/api/pools/{service}/servers/{address}", axum::routing::delete(remove_server::<C>))
        .route("/api/pools/{service}/servers/{address}/state", post(server_state::<C>))
        .route("/api/pools/{service}/servers/{address}/weight", post(weight::<C>))
        .route("/api/pools/{service}/algorithm", post(algorithm::<C>))
        .route("/api/pools/{service}/health", post(health::<C>))
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

/// The snapshot with the process's own figures, read off the traffic's threads.
async fn snapshot_with_process<C: Control>(control: &C) -> stats::Snapshot {
    let mut snapshot = stats::snapshot(&control.current());
    snapshot.process.figures = Some(stats::process::read_blocking().await);
    snapshot
}

async fn get_stats<C: Control>(State(control): State<Arc<C>>) -> Response {
    let mut snapshot = serde_json::to_value(snapshot_with_process(&*control).await).unwrap_or_default();
    if let (Some(fleet), Some(map)) = (control.fleet(), snapshot.as_object_mut()) {
        map.insert("fleet".into(), json!(fleet));
    }
    Json(snapshot).into_response()
}

/// The fleet as this instance sees it: its connection to etcd, the revision it runs, and the
/// registered instances, each marked when it runs another config.
async fn fleet<C: Control>(State(control): State<Arc<C>>) -> Response {
    match control.fleet() {
        Some(status) => Json(status).into_response(),
        None => refuse(StatusCode::NOT_FOUND, "this instance is not in a fleet (no [fleet] in its config)"),
    }
}

/// Every balancing algorithm: its name, title, the modes it serves, whether it hashes, and a
/// line on how it picks (the dashboard's lists are made from it).
async fn algorithms() -> Response {
    Json(Algorithm::ALL.iter().map(|a| a.about()).collect::<Vec<_>>()).into_response()
}

/// 200 when this instance can take traffic, else 503: what keepalived's `track_script` and
/// other load balancers' checks ask.
/// A service still serving ACME's self-signed placeholder is not ready either: its clients
/// would be refused by their certificate check.
pub async fn ready<C: Control>(State(control): State<Arc<C>>) -> Response {
    if !control.ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready: no config with a listener up\n").into_response();
    }
    let waiting: Vec<String> =
        control.current().services.iter().filter(|s| s.config().enabled).filter_map(|s| Some(format!("service {}: {}", s.config().name, s.tls.as_ref()?.placeholder()?))).collect();
    if waiting.is_empty() { (StatusCode::OK, "ready\n").into_response() } else { (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", waiting.join("; "))).into_response() }
}

async fn get_csv<C: Control>(State(control): State<Arc<C>>) -> Response {
    let body = stats::csv(&stats::snapshot(&control.current()));
    ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], body).into_response()
}

async fn metrics<C: Control>(State(control): State<Arc<C>>) -> Response {
    let body = stats::prometheus::render(&snapshot_with_process(&*control).await);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

#[derive(Deserialize)]
struct ExplainQuery {
    service: String,
    client: Option<String>,
    path: Option<String>,
    host: Option<String>,
    cookie: Option<String>,
    sni: Option<String>,
    method: Option<String>,
}

/// The running service named `name`, or the 404 that says there is none.
fn service_named<'a>(generation: &'a crate::live::Generation, name: &str) -> Result<&'a Arc<crate::live::Service>, Box<Response>> {
    generation.services.iter().find(|s| s.config().name == name).ok_or_else(|| Box::new(refuse(StatusCode::NOT_FOUND, format!("no service {name:?}"))))
}

/// What Fulcrum would do now for a request from `client` (and `path`, `host`, `cookie`), and why.
async fn explain<C: Control>(State(control): State<Arc<C>>, Query(q): Query<ExplainQuery>) -> Response {
    let generation = control.current();
    let service = match service_named(&generation, &q.service) {
        Ok(s) => s,
        Err(no) => return *no,
    };
    let client = match q.client.as_deref().map(str::parse::<std::net::IpAddr>).transpose() {
        Ok(c) => c,
        Err(_) => return refuse(StatusCode::BAD_REQUEST, format!("client {:?} is not an IP address", q.client.unwrap_or_default())),
    };
    let question = crate::proxy::explain::Question { client, path: q.path, host: q.host, cookie: q.cookie, sni: q.sni, method: q.method };
    match crate::proxy::explain::explain(service, &question) {
        Ok(e) => Json(e).into_response(),
        Err(why) => refuse(StatusCode::BAD_REQUEST, why.to_string()),
    }
}

#[derive(Deserialize)]
struct RecentQuery {
    service: String,
    limit: Option<usize>,
}

/// The last picks the data path made for `service`, and why: the latest `limit` of those its
/// pools keep.
async fn explain_recent<C: Control>(State(control): State<Arc<C>>, Query(q): Query<RecentQuery>) -> Response {
    let generation = control.current();
    let service = match service_named(&generation, &q.service) {
        Ok(s) => s,
        Err(no) => return *no,
    };
    let most = crate::live::why::RECENT * (1 + service.pools.len());
    let limit = q.limit.unwrap_or(crate::live::why::RECENT);
    if !(1..=most).contains(&limit) {
        return refuse(StatusCode::BAD_REQUEST, format!("limit {limit}: from 1 to {most} (the last {} picks of each of its pools are kept)", crate::live::why::RECENT));
    }
    Json(serde_json::json!({ "service": q.service, "picks": crate::proxy::explain::recent(service, limit) })).into_response()
}

#[derive(Deserialize)]
struct TopQuery {
    top: Option<usize>,
}

/// The most keys `top` may ask for: each is found by a walk of the whole table.
const MOST_TOP: usize = 1000;

fn top_of(q: &TopQuery, default: usize) -> Result<usize, Box<Response>> {
    let n = q.top.unwrap_or(default);
    if !(1..=MOST_TOP).contains(&n) {
        return Err(Box::new(refuse(StatusCode::BAD_REQUEST, format!("top {n}: from 1 to {MOST_TOP}"))));
    }
    Ok(n)
}

/// Every per-client limit with its `top` (10) keys closest to their limit.
async fn limits<C: Control>(State(control): State<Arc<C>>, Query(q): Query<TopQuery>) -> Response {
    let top = match top_of(&q, 10) {
        Ok(n) => n,
        Err(refused) => return *refused,
    };
    let generation = control.current();
    // Each table is walked whole: off the runtime's threads.
    let found = tokio::task::spawn_blocking(move || generation.limits().map(|l| stats::limits::limit_stats(l, Some(top))).collect::<Vec<_>>()).await;
    match found {
        Ok(limits) => Json(json!({ "limits": limits })).into_response(),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the tables failed: {e}")),
    }
}

/// One per-client limit with its `top` (100) keys closest to their limit.
async fn limit<C: Control>(State(control): State<Arc<C>>, Path(table): Path<String>, Query(q): Query<TopQuery>) -> Response {
    let top = match top_of(&q, 100) {
        Ok(n) => n,
        Err(refused) => return *refused,
    };
    let generation = control.current();
    let Some(limiter) = generation.limit(&table).cloned() else {
        return refuse(StatusCode::NOT_FOUND, format!("no limit named {table:?}"));
    };
    match tokio::task::spawn_blocking(move || stats::limits::limit_stats(&limiter, Some(top))).await {
        Ok(found) => Json(found).into_response(),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the table failed: {e}")),
    }
}

/// Forgets one key of a table (an address, a network as the table shows it, or a header's,
/// cookie's or server name's text): the client starts afresh.
async fn clear_limit_key<C: Control>(State(control): State<Arc<C>>, Path((table, key)): Path<(String, String)>) -> Response {
    let generation = control.current();
    let Some(limiter) = generation.limit(&table) else {
        return refuse(StatusCode::NOT_FOUND, format!("no limit named {table:?}"));
    };
    if limiter.open.is_some() {
        return refuse(StatusCode::CONFLICT, format!("{table} counts open connections: a key leaves it when its connections close"));
    }
    if limiter.clear(limiter.parse_key(&key)) {
        tracing::info!(table = %table, key = %key, "limit key cleared");
        Json(json!({ "table": table, "key": key, "cleared": true, "message": format!("{key} cleared from {table}") })).into_response()
    } else {
        refuse(StatusCode::NOT_FOUND, format!("{table} holds no key {key:?}"))
    }
}

#[derive(Deserialize)]
struct HistoryQuery {
    service: Option<String>,
    #[serde(default)]
    since: u64,
}

async fn history<C: Control>(State(control): State<Arc<C>>, Query(q): Query<HistoryQuery>) -> Response {
    let series = control.history().get(q.service.as_deref(), q.since);
    Json(json!({ "interval_secs": stats::history::INTERVAL.as_secs(), "series": series })).into_response()
}

async fn get_config<C: Control>(State(control): State<Arc<C>>) -> Response {
    let config = control.current().config.clone();
    let unsaved = control.unsaved();
    Json(json!({ "toml": config::to_toml(&config), "config": config, "file": control.file().map(|p| p.display().to_string()), "fleet": control.fleet(), "unsaved": unsaved }))
        .into_response()
}

/// The audit trail's latest records, newest first.
async fn audit<C: Control>(State(control): State<Arc<C>>) -> Response {
    let mut records = control.audit();
    records.reverse();
    Json(json!({ "records": records })).into_response()
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
    answer(parse_body(body).await.map(|c| format!("valid: {}", crate::config::services(c.services.len()))))
}

async fn put_config<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Body(body): Body<ConfigBody>) -> Response {
    match parse_body(body).await {
        Ok(c) => answer(control.change(Change::Replace(Box::new(c)), editor).await),
        Err(e) => answer(Err::<String, _>(e)),
    }
}

async fn save<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>) -> Response {
    answer(control.save(editor).await)
}

#[derive(Deserialize)]
struct ReloadQuery {
    #[serde(default)]
    force: bool,
}

/// Edits made through the API and not saved, which reading the config file again would lose:
/// the 409 that names them and shows the diff, unless `force` says to drop them.
fn unsaved_conflict<C: Control>(control: &C, force: bool, action: &str) -> Option<Response> {
    let unsaved = control.unsaved().filter(|_| !force)?;
    let n = unsaved.edits.len().max(1);
    let error = format!(
        "{n} unsaved edit{} would be lost: {}; save them first, or {action} with ?force=true to drop them",
        if n == 1 { "" } else { "s" },
        if unsaved.edits.is_empty() { "the running config differs from the file".to_string() } else { unsaved.edits.join("; ") }
    );
    Some((StatusCode::CONFLICT, Json(json!({ "ok": false, "error": error, "unsaved": unsaved }))).into_response())
}

/// Reads the config file again; 409 while edits are not saved, unless forced.
async fn reload<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Query(q): Query<ReloadQuery>) -> Response {
    if let Some(conflict) = unsaved_conflict(&*control, q.force, "reload") {
        return conflict;
    }
    answer(control.reload(editor).await)
}

/// Replaces the running binary with the one at its path (which reads the config file, as a
/// reload does: 409 while edits are not saved, unless forced); answers once the new process
/// serves, or why it does not and this one serves on.
async fn upgrade<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Query(q): Query<ReloadQuery>) -> Response {
    if let Some(conflict) = unsaved_conflict(&*control, q.force, "upgrade") {
        return conflict;
    }
    answer(control.upgrade(editor).await)
}

#[derive(Deserialize)]
struct StateBody {
    state: ServerAdmin,
}

async fn server_state<C: Control>(
    State(control): State<Arc<C>>,
    Extension(editor): Extension<Editor>,
    Path((service, address)): Path<(String, String)>,
    Body(b): Body<StateBody>,
) -> Response {
    answer(control.change(Change::ServerState { service, address, state: b.state }, editor).await)
}

#[derive(Deserialize)]
struct WeightBody {
    weight: u32,
}

async fn weight<C: Control>(
    State(control): State<Arc<C>>,
    Extension(editor): Extension<Editor>,
    Path((service, address)): Path<(String, String)>,
    Body(b): Body<WeightBody>,
) -> Response {
    answer(control.change(Change::Weight { service, address, weight: b.weight }, editor).await)
}

/// Runs the server's health check now: 200 with its result (passed or not), 404 for no such
/// server, 409 when its pool has no active check.
async fn check_now<C: Control>(State(control): State<Arc<C>>, Path((service, address)): Path<(String, String)>) -> Response {
    use crate::health::CheckNowError;
    match control.check_now(&service, &address).await {
        Ok(checked) => Json(json!({ "ok": true, "check": checked })).into_response(),
        Err(e @ CheckNowError::NoServer { .. }) => refuse(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ CheckNowError::NoCheck(_)) => refuse(StatusCode::CONFLICT, e.to_string()),
        Err(e @ CheckNowError::Stopped) => refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// The connections and requests in flight on a server now, oldest first: the newest
/// `live::inflight::SHOWN` of them, and how many there are in all.
async fn inflight<C: Control>(State(control): State<Arc<C>>, Path((service, address)): Path<(String, String)>) -> Response {
    let generation = control.current();
    let Some((_, entry)) = generation.server(&service, &address) else {
        return refuse(StatusCode::NOT_FOUND, format!("no server {address:?} in {service:?}"));
    };
    let current = entry.state.counters.current.load(std::sync::atomic::Ordering::Relaxed);
    Json(json!({ "service": service, "server": address, "current": current, "shown_at_most": crate::live::inflight::SHOWN, "inflight": entry.state.inflight.read() }))
        .into_response()
}

async fn add_server<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path(service): Path<String>, Body(server): Body<config::Server>) -> Response {
    answer(control.change(Change::AddServer { service, server }, editor).await)
}

async fn remove_server<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path((service, address)): Path<(String, String)>) -> Response {
    answer(control.change(Change::RemoveServer { service, address }, editor).await)
}

#[derive(Deserialize)]
struct AlgorithmBody {
    algorithm: Algorithm,
}

async fn algorithm<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path(service): Path<String>, Body(b): Body<AlgorithmBody>) -> Response {
    answer(control.change(Change::Algorithm { service, algorithm: b.algorithm }, editor).await)
}

/// A new service: the whole rule as JSON, keyed as in the config file (what is left out takes
/// its default), validated with the rest of the config before it starts.
async fn add_service<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Body(service): Body<config::Service>) -> Response {
    answer(control.change(Change::AddService(Box::new(service)), editor).await)
}

async fn remove_service<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path(service): Path<String>) -> Response {
    answer(control.change(Change::RemoveService { service }, editor).await)
}

async fn health<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path(service): Path<String>, Body(health): Body<Health>) -> Response {
    answer(control.change(Change::Health { service, health: Box::new(health) }, editor).await)
}

async fn settings<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path(service): Path<String>, Body(settings): Body<ServiceSettings>) -> Response {
    answer(control.change(Change::Settings { service, settings }, editor).await)
}

/// Replaces a service's routes with the list in the body, validated as a config file's are.
async fn set_routes<C: Control>(
    State(control): State<Arc<C>>,
    Extension(editor): Extension<Editor>,
    Path(service): Path<String>,
    Body(routes): Body<Vec<config::Route>>,
) -> Response {
    answer(control.change(Change::Routes { service, routes }, editor).await)
}

async fn start<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path(service): Path<String>) -> Response {
    answer(control.change(Change::ServiceEnabled { service, enabled: true }, editor).await)
}

async fn stop<C: Control>(State(control): State<Arc<C>>, Extension(editor): Extension<Editor>, Path(service): Path<String>) -> Response {
    answer(control.change(Change::ServiceEnabled { service, enabled: false }, editor).await)
}
