//! The connection to etcd, as `[fleet]` describes it: endpoints, TLS, authentication.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, TlsOptions};

use super::FleetError;
use crate::config::Fleet;

/// Connects to the fleet's etcd. The files it names are read here, on the task that connects,
/// never on a thread that moves traffic.
pub async fn connect(fleet: &Fleet) -> Result<Client, FleetError> {
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
    Ok(Client::connect(&fleet.endpoints, Some(options)).await?)
}
