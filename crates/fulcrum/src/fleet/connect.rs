//! The connection to etcd, as `[fleet]` describes it: endpoints, TLS, authentication.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, TlsOptions};

use super::FleetError;
use super::snapshot::Keys;
use crate::config::Fleet;

/// Connects to one member of the fleet's etcd that can answer for the cluster: the endpoints are
/// tried in turn, from a different one each call, and the first whose linearizable read succeeds
/// (so it is in the quorum) is used. One member per connection, because a channel balanced over
/// all of them sends some of a session's streams (watch, lease renewal) to a member that is down
/// and fails them. The files `[fleet]` names are read here, on the task that connects, never on a
/// thread that moves traffic.
pub async fn connect(fleet: &Fleet) -> Result<Client, FleetError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let options = options(fleet).await?;
    let first = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut last = None;
    for k in 0..fleet.endpoints.len() {
        let endpoint = &fleet.endpoints[(first + k) % fleet.endpoints.len()];
        let attempt = async {
            let mut client = Client::connect([endpoint], Some(options.clone())).await?;
            // A key of the fleet's own: with etcd's authentication, a user may read nothing else.
            client.get(Keys::new(&fleet.prefix).marker(), Some(etcd_client::GetOptions::new().with_keys_only())).await?;
            Ok::<_, FleetError>(client)
        };
        match tokio::time::timeout(Duration::from_secs(3), attempt).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(e)) => last = Some(FleetError::Member { endpoint: endpoint.clone(), cause: e.to_string() }),
            Err(_) => last = Some(FleetError::Member { endpoint: endpoint.clone(), cause: "no answer within 3 s".into() }),
        }
    }
    Err(last.unwrap_or(FleetError::WatchEnded("no etcd endpoint".into())))
}

async fn options(fleet: &Fleet) -> Result<ConnectOptions, FleetError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        // HTTP/2 pings find a member that went away while the connection looked open.
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
    if let (Some(user), Some(file)) = (&fleet.user, &fleet.password_file) {
        let password = tokio::fs::read_to_string(file).await.map_err(|cause| FleetError::File { file: file.clone(), cause })?;
        options = options.with_user(user, password.trim_end_matches(['\r', '\n']));
    }
    if fleet.endpoints.iter().any(|e| e.starts_with("https://")) {
        let tls = match &fleet.ca {
            Some(file) => {
                let pem = tokio::fs::read(file).await.map_err(|cause| FleetError::File { file: file.clone(), cause })?;
                TlsOptions::new().ca_certificate(Certificate::from_pem(pem))
            }
            None => TlsOptions::new().with_native_roots(),
        };
        options = options.with_tls(tls);
    }
    Ok(options)
}
