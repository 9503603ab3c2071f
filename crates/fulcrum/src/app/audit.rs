//! The audit trail of a running instance: every config change, reload and save, whoever made it,
//! kept as the latest [`RECENT`] records in memory (`GET /api/audit`, the dashboard's History) and,
//! with `[audit] file`, appended as JSON lines to a file rotated by size.
//!
//! Records are rare (one per change), but the file is written off the runtime's threads all the
//! same, one write at a time, so a slow disk never holds a change, let alone traffic; a write
//! that fails is logged and the record stays in memory.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing::warn;

use crate::config::audit::Record;

/// Records kept in memory, newest last.
pub const RECENT: usize = 200;

#[derive(Default)]
pub struct Trail {
    recent: Mutex<VecDeque<Record>>,
    file: Mutex<Option<Arc<Mutex<Rotating>>>>,
}

impl Trail {
    /// Follows the config's `[audit]`: opens, keeps or drops the file (a reload may change it).
    pub fn configure(&self, audit: Option<&crate::config::Audit>) {
        let Ok(mut file) = self.file.lock() else { return };
        let wanted = audit.map(|a| (PathBuf::from(&a.file), a.max_size, a.keep));
        let same = match (&*file, &wanted) {
            (Some(f), Some(w)) => f.lock().is_ok_and(|f| (f.path.clone(), f.max_size, f.keep) == *w),
            (None, None) => true,
            _ => false,
        };
        if !same {
            *file = wanted.map(|(path, max_size, keep)| Arc::new(Mutex::new(Rotating { path, max_size, keep, open: None })));
        }
    }

    /// Keeps `record`, and appends it to the file off the runtime's threads.
    pub fn record(&self, record: Record) {
        match record.outcome {
            crate::config::audit::Outcome::Applied => tracing::info!(who = %record.who, source = ?record.source, "audit: {}", record.what),
            crate::config::audit::Outcome::Refused => tracing::info!(who = %record.who, source = ?record.source, "audit: {} (refused)", record.what),
        }
        let file = self.file.lock().ok().and_then(|f| f.clone());
        if let Some(file) = file {
            let line = serde_json::to_string(&record).unwrap_or_default();
            let write = move || {
                let Ok(mut f) = file.lock() else { return };
                if let Err(e) = f.append(&line) {
                    warn!(file = %f.path.display(), "cannot write the audit log: {e}");
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(write)),
                Err(_) => write(),
            }
        }
        if let Ok(mut recent) = self.recent.lock() {
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(record);
        }
    }

    /// The latest records, oldest first.
    pub fn recent(&self) -> Vec<Record> {
        self.recent.lock().map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }
}

/// A JSON-lines file that moves aside when it would pass `max_size`.
struct Rotating {
    path: PathBuf,
    max_size: u64,
    keep: u32,
    open: Option<(File, u64)>,
}

impl Rotating {
    fn append(&mut self, line: &str) -> std::io::Result<()> {
        let wanted = line.len() as u64 + 1;
        if let Some((_, size)) = &self.open
            && *size > 0
            && size + wanted > self.max_size
        {
            self.open = None;
            rotate(&self.path, self.keep)?;
        }
        if self.open.is_none() {
            let file = open(&self.path)?;
            let size = file.metadata()?.len();
            if size > 0 && size + wanted > self.max_size {
                drop(file);
                rotate(&self.path, self.keep)?;
                self.open = Some((open(&self.path)?, 0));
            } else {
                self.open = Some((file, size));
            }
        }
        let Some((file, size)) = &mut self.open else { return Ok(()) };
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        // One write of the whole line: with O_APPEND, another writer's lines never interleave.
        file.write_all(&bytes)?;
        *size += wanted;
        Ok(())
    }
}

/// Opens for appending, creating it readable by its owner and group only: a config's diff may
/// name what an operator would rather not show every user of the host.
fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new().create(true).append(true).mode(0o640).open(path)
}

/// `FILE.(keep-1)` -> `FILE.keep` ... `FILE` -> `FILE.1`; the oldest is overwritten.
fn rotate(path: &Path, keep: u32) -> std::io::Result<()> {
    let numbered = |n: u32| {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    };
    for n in (1..keep).rev() {
        let from = numbered(n);
        if from.exists() {
            std::fs::rename(&from, numbered(n + 1))?;
        }
    }
    std::fs::rename(path, numbered(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::audit::{Outcome, Source};

    #[test]
    fn the_file_rotates_by_size_and_keeps_as_many_as_asked() {
        let dir = std::env::temp_dir().join(format!("fulcrum-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let mut file = Rotating { path: path.clone(), max_size: 1000, keep: 2, open: None };
        let line = serde_json::to_string(&Record::now("a", Source::Api, "x".repeat(150), Outcome::Applied, "")).unwrap();
        for _ in 0..40 {
            file.append(&line).unwrap();
        }
        for p in [path.clone(), dir.join("audit.log.1"), dir.join("audit.log.2")] {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(text.len() as u64 <= 1000 && !text.is_empty(), "{}: {}", p.display(), text.len());
            assert!(text.lines().all(|l| serde_json::from_str::<Record>(l).is_ok()), "whole lines only");
        }
        assert!(!dir.join("audit.log.3").exists(), "keep = 2");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn memory_keeps_the_latest_records() {
        let trail = Trail::default();
        for i in 0..RECENT + 5 {
            trail.record(Record::now("a", Source::Api, format!("change {i}"), Outcome::Applied, ""));
        }
        let recent = trail.recent();
        assert_eq!(recent.len(), RECENT);
        assert_eq!(recent.last().unwrap().what, format!("change {}", RECENT + 4));
    }
}
