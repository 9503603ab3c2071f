//! `mode = "ftp"` against four real vsftpd servers: ten clients with their own source addresses
//! (curl in EPSV, PASV, EPRT and PORT modes, Python's ftplib passive and active) each log in,
//! download ten files from 1 KiB to 16 MiB and upload one, and every byte matches; the sessions
//! are spread round robin. Then the attacks: FTP bounce, data-port theft, FTPS, port exhaustion;
//! and a server behind a listener that takes the PROXY protocol.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

const SIZES: [usize; 10] = [1 << 10, 5 << 10, 20 << 10, 100 << 10, 300 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20];

/// One vsftpd serving `root` anonymously (downloads from `pub/`, uploads into `pub/upload/`).
struct Vsftpd {
    addr: SocketAddr,
    root: PathBuf,
    child: Child,
}

impl Vsftpd {
    fn start(name: &str, files: &Path) -> Vsftpd {
        let bin = ["/usr/sbin/vsftpd", "/usr/bin/vsftpd"].into_iter().find(|p| Path::new(p).exists()).expect("vsftpd must be installed (scripts/test installs it)");
        let dir = scratch(&format!("vsftpd-{name}"));
        let root = dir.join("root");
        let empty = dir.join("empty");
        std::fs::create_dir_all(root.join("pub/upload")).unwrap();
        std::fs::create_dir_all(&empty).unwrap();
        for entry in std::fs::read_dir(files).unwrap() {
            let entry = entry.unwrap();
            std::fs::hard_link(entry.path(), root.join("pub").join(entry.file_name())).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        // vsftpd refuses an anonymous root the ftp user can write to; uploads go to pub/upload.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o555)).unwrap();
        std::fs::set_permissions(root.join("pub/upload"), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o555)).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        // vsftpd picks its passive ports at random from 1024 up unless told a range. One of them,
        // bound by a neighbour test's server between `free_port` and this server's bind, took
        // this server's port: this one exited, and the readiness probe was answered by the
        // neighbour's data listener. 40000 and up is clear of `free_port`'s 24000 to 31999.
        let conf = dir.join("vsftpd.conf");
        std::fs::write(
            &conf,
            format!(
                "listen=YES\nlisten_address=127.0.0.1\nlisten_port={}\nbackground=NO\nanonymous_enable=YES\nanon_root={}\n\
                 no_anon_password=YES\nlocal_enable=NO\nwrite_enable=YES\nanon_upload_enable=YES\nanon_umask=022\n\
                 connect_from_port_20=NO\nseccomp_sandbox=NO\nsecure_chroot_dir={}\nxferlog_enable=NO\nmax_clients=0\nmax_per_ip=0\n\
                 pasv_min_port=40000\npasv_max_port=60000\n\
                 ftpd_banner=vsftpd {name}\n",
                addr.port(),
                root.display(),
                empty.display()
            ),
        )
        .unwrap();
        let child = Command::new(bin).arg(&conf).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        wait_until(&format!("vsftpd {name}"), Duration::from_secs(10), || TcpStream::connect(addr).is_ok());
        Vsftpd { addr, root, child }
    }
}

impl Drop for Vsftpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ten files of the sizes above, with content that differs per file and per byte position.
fn make_files() -> PathBuf {
    let dir = scratch("ftp-files");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for (i, size) in SIZES.iter().enumerate() {
        let mut data = Vec::with_capacity(*size);
        while data.len() < *size {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.extend_from_slice(&x.to_le_bytes());
        }
        data.truncate(*size);
        std::fs::write(dir.join(format!("file{i}.bin")), data).unwrap();
    }
    dir
}

fn ftp_config(servers: &[&Vsftpd], data_ports: &str) -> String {
    let mut s = format!(
        "[[service]]\nname = \"ftp\"\nlisten = \"{{LISTEN}}\"\nmode = \"ftp\"\nalgorithm = \"round-robin\"\ndata_ports = \"{data_ports}\"\n\n\
         [service.health]\nkind = \"ftp\"\ninterval = \"300ms\"\ntimeout = \"1s\"\nrise = 1\nfall = 1\n"
    );
    for v in servers {
        s.push_str(&format!("\n[[service.server]]\naddress = \"{}\"\n", v.addr));
    }
    s
}

/// A data-port range of its own per test, below Linux's ephemeral ports.
fn data_ports(base: u16, len: u16) -> String {
    format!("{}-{}", base, base + len - 1)
}

/// How one client talks FTP. Active mode is spoken by Python's ftplib: curl 7.88's `--ftp-port`
/// reads an unset address when it sets up its listening socket (curl issue 10622) and now and then
/// announces a port it does not listen on, which would fail this test for a reason not Fulcrum's.
#[derive(Debug, Clone, Copy)]
enum Client {
    CurlEpsv,
    CurlPasv,
    FtplibPassive,
    FtplibPort,
    FtplibEprt,
}

fn run_client(kind: Client, source: IpAddr, vip: SocketAddr, out: &Path, upload: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out).unwrap();
    let upload_name = format!("client-{source}.bin");
    let ok = |c: &mut Command| -> Result<(), String> {
        let o = c.output().map_err(|e| e.to_string())?;
        if o.status.success() { Ok(()) } else { Err(format!("{kind:?} from {source}: {}", String::from_utf8_lossy(&o.stderr))) }
    };
    match kind {
        Client::FtplibPassive | Client::FtplibPort | Client::FtplibEprt => {
            let script = r#"
import ftplib, sys
src, host, port, out, upload, name, mode = sys.argv[1:8]
def session():
    f = ftplib.FTP(source_address=(src, 0), timeout=60)
    f.connect(host, int(port))
    f.login()
    f.set_pasv(mode == "passive")
    if mode == "eprt":
        # ftplib sends PORT on IPv4; EPRT takes the same (host, port).
        f.sendport = f.sendeprt
    return f
f = session()
for i in range(10):
    with open(f"{out}/file{i}.bin", "wb") as w:
        f.retrbinary(f"RETR pub/file{i}.bin", w.write)
f.quit()
g = session()
with open(upload, "rb") as r:
    g.storbinary(f"STOR pub/upload/{name}", r)
g.quit()
"#;
            let mode = match kind {
                Client::FtplibPassive => "passive",
                Client::FtplibPort => "port",
                _ => "eprt",
            };
            ok(Command::new("python3")
                .args(["-c", script])
                .arg(source.to_string())
                .arg(vip.ip().to_string())
                .arg(vip.port().to_string())
                .arg(out)
                .arg(upload)
                .arg(&upload_name)
                .arg(mode))
        }
        _ => {
            let mode: Vec<String> = match kind {
                Client::CurlEpsv => vec![],
                Client::CurlPasv => vec!["--disable-epsv".into()],
                _ => unreachable!(),
            };
            let base = ["-sS", "--max-time", "120", "--interface"];
            // One login, ten files on the one control connection.
            let mut get = Command::new("curl");
            get.args(base).arg(source.to_string()).args(&mode);
            for i in 0..SIZES.len() {
                get.arg(format!("ftp://{vip}/pub/file{i}.bin")).arg("-o").arg(out.join(format!("file{i}.bin")));
            }
            ok(&mut get)?;
            ok(Command::new("curl").args(base).arg(source.to_string()).args(&mode).arg("-T").arg(upload).arg(format!("ftp://{vip}/pub/upload/{upload_name}")))
        }
    }
}

#[test]
fn ten_clients_download_and_upload_through_four_vsftpd_servers_in_every_mode() {
    let files = make_files();
    let servers: Vec<Vsftpd> = (1..=4).map(|i| Vsftpd::start(&format!("ftp{i}"), &files)).collect();
    let f = Fulcrum::start(&ftp_config(&servers.iter().collect::<Vec<_>>(), &data_ports(21000, 200)));
    f.wait_all_up();
    let s = f.server_stats(&servers[0].addr.to_string());
    assert!(s["last_check"].as_str().unwrap().contains("220"), "the ftp check reads the greeting: {s}");

    let kinds = [Client::CurlEpsv, Client::CurlPasv, Client::FtplibPassive, Client::FtplibPort, Client::FtplibEprt];
    let work = scratch("ftp-clients");
    let threads: Vec<_> = (0..10)
        .map(|i| {
            let kind = kinds[i % kinds.len()];
            let source: IpAddr = format!("127.0.0.{}", 11 + i).parse().unwrap();
            let out = work.join(format!("client{i}"));
            let upload = work.join(format!("upload{i}.bin"));
            std::fs::write(&upload, format!("upload of client {i} in mode {kind:?}\n").repeat(1000 + i * 37)).unwrap();
            let vip = f.listen;
            std::thread::spawn(move || (kind, source, out.clone(), upload.clone(), run_client(kind, source, vip, &out, &upload)))
        })
        .collect();
    for t in threads {
        let (kind, source, out, upload, result) = t.join().unwrap();
        result.unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
        for i in 0..SIZES.len() {
            let name = format!("file{i}.bin");
            let got = std::fs::read(out.join(&name)).unwrap();
            let want = std::fs::read(files.join(&name)).unwrap();
            assert!(got == want, "{kind:?} from {source}: {name} differs ({} bytes, want {})", got.len(), want.len());
        }
        let want = std::fs::read(&upload).unwrap();
        let landed: Vec<&Vsftpd> = servers.iter().filter(|v| v.root.join(format!("pub/upload/client-{source}.bin")).exists()).collect();
        assert_eq!(landed.len(), 1, "{kind:?} from {source}: the upload is on exactly one server");
        assert_eq!(std::fs::read(landed[0].root.join(format!("pub/upload/client-{source}.bin"))).unwrap(), want, "{kind:?} upload");
    }

    // At least 20 control sessions (a download and an upload session per client; a client may open
    // one more), round robin over four.
    let stats = f.stats();
    let per_server: Vec<(u64, u64)> =
        stats["services"][0]["servers"].as_array().unwrap().iter().map(|v| (v["total"].as_u64().unwrap(), v["data_transfers"].as_u64().unwrap())).collect();
    println!("control sessions and data transfers per server: {per_server:?}");
    let sessions: Vec<u64> = per_server.iter().map(|(s, _)| *s).collect();
    assert!(sessions.iter().sum::<u64>() >= 20, "{per_server:?}");
    assert!(sessions.iter().max().unwrap() - sessions.iter().min().unwrap() <= 1, "round robin spreads the sessions: {per_server:?}");
    assert_eq!(per_server.iter().map(|(_, d)| d).sum::<u64>(), 110, "ten downloads and one upload per client: {per_server:?}");
    assert!(per_server.iter().all(|(_, d)| *d > 0), "{per_server:?}");
}

/// A control connection spoken by hand, for the attacks.
struct Control {
    reader: BufReader<TcpStream>,
}

impl Control {
    fn open(source: &str, vip: SocketAddr) -> Control {
        let s = connect_from(Some(source.parse().unwrap()), vip).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Control { reader: BufReader::new(s) };
        assert!(c.read_reply().starts_with("220"));
        assert!(c.cmd("USER anonymous").starts_with("230") || c.cmd("PASS x").starts_with("230"));
        c
    }

    fn read_reply(&mut self) -> String {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            all.push_str(&line);
            let b = line.as_bytes();
            if line.is_empty() || (b.len() >= 4 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b' ') {
                return all;
            }
        }
    }

    fn cmd(&mut self, line: &str) -> String {
        write!(self.reader.get_mut(), "{line}\r\n").unwrap();
        self.read_reply()
    }

    /// PASV, and the port the reply names.
    fn pasv(&mut self) -> (String, Option<u16>) {
        let r = self.cmd("PASV");
        let nums: Vec<u16> = r.split(['(', ')']).nth(1).map(|x| x.split(',').filter_map(|n| n.trim().parse().ok()).collect()).unwrap_or_default();
        let port = (nums.len() == 6).then(|| nums[4] * 256 + nums[5]);
        (r, port)
    }
}

#[test]
fn bounce_theft_ftps_and_port_exhaustion_are_refused() {
    let files = make_files();
    let server = Vsftpd::start("guard", &files);
    // Two data ports only, to exhaust them.
    let f = Fulcrum::start(&ftp_config(&[&server], &data_ports(21500, 2)));
    f.wait_all_up();
    let vip = f.listen;

    // FTP bounce: PORT or EPRT naming any address but the client's own is refused, not forwarded.
    let mut a = Control::open("127.0.0.11", vip);
    let r = a.cmd("PORT 127,0,0,99,200,10");
    assert!(r.starts_with("500"), "{r}");
    let r = a.cmd("EPRT |1|127.0.0.99|51210|");
    assert!(r.starts_with("500"), "{r}");
    let r = a.cmd("EPRT |1|127.0.0.11|0|");
    assert!(r.starts_with("501"), "{r}");
    let r = a.cmd("EPRT |7|x|1|");
    assert!(r.starts_with("522"), "{r}");
    // FTPS cannot be balanced by reading replies: refused with the reason.
    let r = a.cmd("AUTH TLS");
    assert!(r.starts_with("534") && r.contains("plain FTP"), "{r}");

    // Data theft: another address connecting to the port announced to client A gets nothing,
    // and A's transfer still works.
    let (r, port) = a.pasv();
    let port = port.unwrap_or_else(|| panic!("PASV: {r}"));
    assert!((21500..=21501).contains(&port), "the port comes from data_ports: {r}");
    assert!(r.contains("127,0,0,1,"), "the address is Fulcrum's: {r}");
    let mut thief = connect_from(Some("127.0.0.66".parse().unwrap()), SocketAddr::new(vip.ip(), port)).unwrap();
    thief.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut stolen = Vec::new();
    let _ = std::io::Read::read_to_end(&mut thief, &mut stolen);
    assert!(stolen.is_empty(), "the thief got {} bytes", stolen.len());
    let mut data = connect_from(Some("127.0.0.11".parse().unwrap()), SocketAddr::new(vip.ip(), port)).unwrap();
    let r = a.cmd("RETR pub/file2.bin");
    assert!(r.starts_with("150"), "{r}");
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut data, &mut got).unwrap();
    assert_eq!(got, std::fs::read(files.join("file2.bin")).unwrap());
    assert!(a.read_reply().starts_with("226"));
    f.wait_log("data connection refused: the port belongs to another address's session");

    // Exhaustion: two sessions hold the two ports; a third gets a clean 425.
    let (r, p1) = a.pasv();
    assert!(p1.is_some(), "{r}");
    let mut b = Control::open("127.0.0.12", vip);
    let (r, p2) = b.pasv();
    assert!(p2.is_some(), "{r}");
    let mut c = Control::open("127.0.0.13", vip);
    let (r, p3) = c.pasv();
    assert!(p3.is_none() && r.starts_with("425"), "{r}");
    // A session that ends releases its port.
    assert!(b.cmd("QUIT").starts_with("221"));
    wait_until("a released data port", Duration::from_secs(5), || c.pasv().1.is_some());
}

#[test]
fn a_data_port_taken_from_the_owners_own_address_carries_nothing() {
    let files = make_files();
    let server = Vsftpd::start("same-address", &files);
    let f = Fulcrum::start(&ftp_config(&[&server], &data_ports(21700, 10)));
    f.wait_all_up();
    let vip = f.listen;
    let owner: IpAddr = "127.0.0.11".parse().unwrap();

    // Another program at the owner's address (a second session behind the same NAT) connects to
    // the owner's data port before the owner does; then the owner connects and asks for a file.
    let mut a = Control::open("127.0.0.11", vip);
    let (r, port) = a.pasv();
    let port = port.unwrap_or_else(|| panic!("PASV: {r}"));
    let mut thief = connect_from(Some(owner), SocketAddr::new(vip.ip(), port)).unwrap();
    thief.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The owner's connect may be refused or reset: only what the thief reads matters here.
    let _owner_data = connect_from(Some(owner), SocketAddr::new(vip.ip(), port));
    let r = a.cmd("RETR pub/file2.bin");
    assert!(r.starts_with("425"), "a contested port must not carry the transfer: {r}");
    let mut stolen = Vec::new();
    let _ = std::io::Read::read_to_end(&mut thief, &mut stolen);
    assert!(stolen.is_empty(), "the other connection from the owner's address got {} bytes", stolen.len());
    f.wait_log("more than one connection came from the client's address");

    // The session goes on: a new port, taken by the owner alone, carries the file.
    let (r, port) = a.pasv();
    let port = port.unwrap_or_else(|| panic!("PASV: {r}"));
    let mut data = connect_from(Some(owner), SocketAddr::new(vip.ip(), port)).unwrap();
    let r = a.cmd("RETR pub/file2.bin");
    assert!(r.starts_with("150"), "{r}");
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut data, &mut got).unwrap();
    assert_eq!(got, std::fs::read(files.join("file2.bin")).unwrap());
    assert!(a.read_reply().starts_with("226"));
    // Once taken, the port is closed to everyone, the owner's address included.
    assert!(connect_from(Some(owner), SocketAddr::new(vip.ip(), port)).is_err(), "a claimed port still accepts");
}

#[test]
fn the_ftp_check_takes_a_stopped_server_out() {
    let files = make_files();
    let one = Vsftpd::start("up", &files);
    let mut two = Vsftpd::start("down", &files);
    let f = Fulcrum::start(&ftp_config(&[&one, &two], &data_ports(21600, 10)));
    f.wait_all_up();
    let _ = two.child.kill();
    let _ = two.child.wait();
    wait_until("the stopped server down", Duration::from_secs(10), || f.server_stats(&two.addr.to_string())["state"] == "down");
    // Every session now goes to the server that is up.
    for _ in 0..4 {
        let out = Command::new("curl").args(["-sS", "--max-time", "20"]).arg(format!("ftp://{}/pub/file0.bin", f.listen)).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, std::fs::read(files.join("file0.bin")).unwrap());
    }
}

/// nginx's stream module in front of one FTP server: it takes a PROXY header on each connection
/// (`listen ... proxy_protocol`), logs the client address the header carried, and relays the
/// rest, so the FTP server behind it runs the session.
struct ProxiedFtp {
    addr: SocketAddr,
    log: PathBuf,
    child: Child,
}

impl ProxiedFtp {
    fn start(server: SocketAddr) -> ProxiedFtp {
        let dir = scratch("nginx-stream");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("sessions.log");
        let conf = format!(
            "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\ndaemon off;\nmaster_process off;\nworker_processes 1;\nuser root root;\n\
             pid {dir}/nginx.pid;\nerror_log {dir}/error.log info;\nevents {{ worker_connections 256; }}\n\
             stream {{\n    log_format client 'client=$proxy_protocol_addr';\n    \
             server {{ listen {addr} proxy_protocol; proxy_pass {server}; access_log {log} client; }}\n}}\n",
            dir = dir.display(),
            log = log.display(),
        );
        let child = run_nginx(&dir, &conf, addr, "nginx's stream module");
        ProxiedFtp { addr, log, child }
    }

    fn sessions(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ProxiedFtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `proxy_protocol` on an FTP server: its control connections start with the client's address,
/// which the server in front of vsftpd logs; the `ftp` check sends a header with no client
/// (v1 `UNKNOWN`) and still reads the greeting; the files arrive whole over data connections.
#[test]
fn an_ftp_server_sent_the_proxy_protocol_sees_each_clients_address() {
    let files = make_files();
    let vsftpd = Vsftpd::start("behind-proxy", &files);
    let front = ProxiedFtp::start(vsftpd.addr);
    let config = ftp_config(&[], &data_ports(21800, 10)) + &format!("\n[[service.server]]\naddress = \"{}\"\nproxy_protocol = \"v1\"\n", front.addr);
    let f = Fulcrum::start(&config);
    f.wait_all_up();
    let check = f.server_stats(&front.addr.to_string())["last_check"].as_str().unwrap().to_string();
    assert!(check.contains("220 vsftpd behind-proxy"), "the check got the greeting through the header: {check}");
    for last in [31u8, 32] {
        let source = format!("127.0.0.{last}");
        let out = Command::new("curl").args(["-sS", "--max-time", "20", "--interface", &source]).arg(format!("ftp://{}/pub/file3.bin", f.listen)).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, std::fs::read(files.join("file3.bin")).unwrap());
        wait_until(&format!("{source}'s session logged"), Duration::from_secs(10), || front.sessions().lines().any(|l| l == format!("client={source}")));
    }
}
