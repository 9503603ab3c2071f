//! `DiskStore`: ACME's state for a standalone instance, in a directory the operator names
//! (`storage`). The directory is made 0700 and every file 0600 (an account key and certificate
//! keys are secrets); a file is written whole to a temporary name, synced, then renamed over the
//! old one, so a crash leaves the old or the new file, never half of one. Every read and write
//! runs on a blocking thread; challenges live in memory only (the instance answers its own
//! validators), so `challenge` never touches the disk.
//!
//! Layout: `account-HASH.json` per directory URL (instant-acme's credentials), and for each
//! certificate `KEY.crt` (the chain, PEM) and `KEY.key` (its key, PEM), `KEY` being
//! `certificate_key` of its names (hashed when too long for a file name).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::store::{Challenge, Fut, Held, Store, StoreError, Stored};

/// The longest certificate key used as a file name as it is (a file name holds 255 bytes).
const LONGEST_NAME: usize = 200;

pub struct DiskStore {
    dir: PathBuf,
    challenges: Mutex<HashMap<Challenge, Vec<u8>>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    changes: tokio::sync::watch::Sender<u64>,
}

struct Lock(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>);
impl Held for Lock {}

impl DiskStore {
    /// The store in `dir`, which must exist (`check` says so); made 0700 if it is not already.
    pub fn open(dir: &Path) -> Result<DiskStore, StoreError> {
        let meta = std::fs::metadata(dir).map_err(|e| StoreError(format!("{}: {e}", dir.display())))?;
        if !meta.is_dir() {
            return Err(StoreError(format!("{}: not a directory", dir.display())));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            // Narrowed only when it is Fulcrum's own: never a shared directory such as /tmp.
            use std::os::unix::fs::MetadataExt;
            if meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o1000 != 0 {
                return Err(StoreError(format!(
                    "{}: others may read it (mode {:o}) and it is not Fulcrum's own to narrow: name a directory of its own, mode 0700",
                    dir.display(),
                    meta.mode() & 0o7777
                )));
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| StoreError(format!("{}: cannot make it 0700: {e}", dir.display())))?;
        }
        Ok(DiskStore { dir: dir.to_path_buf(), challenges: Mutex::default(), locks: Mutex::default(), changes: tokio::sync::watch::channel(0).0 })
    }

    /// The store in `dir`, made (0700) when missing.
    pub fn create(dir: &Path) -> Result<DiskStore, StoreError> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| StoreError(format!("{}: {e}", dir.display())))?;
        Self::open(dir)
    }

    fn path(&self, key: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", file_name(key)))
    }

    fn account_path(&self, directory: &str) -> PathBuf {
        self.dir.join(format!("account-{:016x}.json", xxhash_rust::xxh3::xxh3_64(directory.as_bytes())))
    }
}

/// A certificate key as a file name: itself when short, else a hash of it (names never contain
/// `/`: `validate` holds them to DNS names).
fn file_name(key: &str) -> String {
    if key.len() <= LONGEST_NAME && !key.contains('/') && !key.starts_with('.') { key.to_string() } else { format!("h-{:016x}", xxhash_rust::xxh3::xxh3_64(key.as_bytes())) }
}

/// Writes `data` to `path` atomically, 0600: a temporary file beside it, synced, renamed.
fn write_private(path: &Path, data: &[u8]) -> Result<(), StoreError> {
    let fail = |e: std::io::Error| StoreError(format!("{}: {e}", path.display()));
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).map_err(fail)?;
    f.write_all(data).and_then(|_| f.sync_all()).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

/// Reads `path`; a missing file is `None`.
fn read(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match std::fs::read(path) {
        Ok(data) => Ok(Some(data)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError(format!("{}: {e}", path.display()))),
    }
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, StoreError> + Send + 'static) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| StoreError(format!("the store's thread failed: {e}")))?
}

impl Store for DiskStore {
    fn account<'a>(&'a self, directory: &'a str) -> Fut<'a, Option<Vec<u8>>> {
        let path = self.account_path(directory);
        Box::pin(blocking(move || read(&path)))
    }

    fn save_account<'a>(&'a self, directory: &'a str, credentials: &'a [u8]) -> Fut<'a, ()> {
        let (path, data) = (self.account_path(directory), credentials.to_vec());
        Box::pin(blocking(move || write_private(&path, &data)))
    }

    fn certificate<'a>(&'a self, key: &'a str) -> Fut<'a, Option<Stored>> {
        let (crt, pem) = (self.path(key, "crt"), self.path(key, "key"));
        Box::pin(blocking(move || {
            let text = |d: Vec<u8>, p: &Path| String::from_utf8(d).map_err(|_| StoreError(format!("{}: not PEM text", p.display())));
            match (read(&crt)?, read(&pem)?) {
                (Some(chain), Some(key)) => Ok(Some(Stored { chain_pem: text(chain, &crt)?, key_pem: text(key, &pem)? })),
                _ => Ok(None),
            }
        }))
    }

    fn save_certificate<'a>(&'a self, key: &'a str, cert: &'a Stored) -> Fut<'a, ()> {
        let (crt, pem, cert) = (self.path(key, "crt"), self.path(key, "key"), cert.clone());
        Box::pin(async move {
            // The key first: a chain on disk always has its key beside it.
            blocking(move || write_private(&pem, cert.key_pem.as_bytes()).and_then(|_| write_private(&crt, cert.chain_pem.as_bytes()))).await?;
            self.changes.send_modify(|n| *n += 1);
            Ok(())
        })
    }

    fn lock<'a>(&'a self, key: &'a str) -> Fut<'a, Box<dyn Held>> {
        let mutex = self.locks.lock().unwrap_or_else(|e| e.into_inner()).entry(key.to_string()).or_default().clone();
        Box::pin(async move { Ok(Box::new(Lock(mutex.lock_owned().await)) as Box<dyn Held>) })
    }

    fn put_challenge<'a>(&'a self, challenge: &'a Challenge, answer: &'a [u8]) -> Fut<'a, ()> {
        self.challenges.lock().unwrap_or_else(|e| e.into_inner()).insert(challenge.clone(), answer.to_vec());
        Box::pin(async { Ok(()) })
    }

    fn challenge(&self, challenge: &Challenge) -> Option<Vec<u8>> {
        self.challenges.lock().unwrap_or_else(|e| e.into_inner()).get(challenge).cloned()
    }

    fn remove_challenge<'a>(&'a self, challenge: &'a Challenge) -> Fut<'a, ()> {
        self.challenges.lock().unwrap_or_else(|e| e.into_inner()).remove(challenge);
        Box::pin(async { Ok(()) })
    }

    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[tokio::test]
    async fn files_are_private_and_written_whole_and_a_save_ticks_changes() {
        let dir = std::env::temp_dir().join(format!("fulcrum-acme-disk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let store = DiskStore::open(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let changes = store.changes();
        assert_eq!(store.certificate("a.test").await.unwrap(), None);
        let cert = Stored { chain_pem: "CHAIN".into(), key_pem: "KEY".into() };
        store.save_certificate("a.test", &cert).await.unwrap();
        assert!(changes.has_changed().unwrap());
        assert_eq!(store.certificate("a.test").await.unwrap(), Some(cert));
        for f in ["a.test.crt", "a.test.key"] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        assert!(!dir.join("a.test.tmp").exists());
        store.save_account("https://ca/dir", b"{}").await.unwrap();
        assert_eq!(store.account("https://ca/dir").await.unwrap().as_deref(), Some(&b"{}"[..]));
        assert_eq!(store.account("https://other/dir").await.unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_directory_is_an_error_that_names_it() {
        let err = DiskStore::open(Path::new("/nonexistent/acme")).err().unwrap();
        assert!(err.0.contains("/nonexistent/acme"), "{err}");
    }

    #[test]
    fn long_keys_become_hashed_file_names() {
        assert_eq!(file_name("a.test,b.test"), "a.test,b.test");
        let long = "x".repeat(300);
        assert!(file_name(&long).starts_with("h-") && file_name(&long).len() == 18);
        assert!(file_name("../etc").starts_with("h-"));
    }

    #[tokio::test]
    async fn challenges_answer_from_memory_until_removed() {
        let dir = std::env::temp_dir().join(format!("fulcrum-acme-challenge-{}", std::process::id()));
        let store = DiskStore::create(&dir).unwrap();
        let c = Challenge::Http01 { token: "t".into() };
        store.put_challenge(&c, b"answer").await.unwrap();
        assert_eq!(store.challenge(&c).as_deref(), Some(&b"answer"[..]));
        store.remove_challenge(&c).await.unwrap();
        assert_eq!(store.challenge(&c), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
