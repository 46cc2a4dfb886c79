//! A network link that really drops packets, for the tests of what flower does when a
//! network silently loses its traffic (no FIN, no RST, no ICMP: the peer's kernel never
//! sees a segment, so nothing is acknowledged). A userspace proxy that stops copying
//! cannot do that: its kernel still acknowledges every byte.
//!
//! The link is a veth pair between this test process's network namespace and a new,
//! anonymous one (`unshare(CLONE_NEWNET)` on a thread of the test, which keeps it), with
//! an address on each side. [`DroppingLink::forward`] listens inside the namespace and
//! copies each connection to a server of the host (the test PostgreSQL, on loopback);
//! [`DroppingLink::drop_packets`] makes the namespace drop every packet in and out
//! (nftables, `policy drop`), [`DroppingLink::restore`] lifts it.
//!
//! Needs root (CAP_NET_ADMIN), `ip` (iproute2), `nsenter` and `nft` (nftables). Without
//! them the test skips saying why (component `netns`; `.ci/run` requires it). Names are
//! unique per process and link, so parallel tests and parallel runs never collide; the
//! link is deleted when the value is dropped (a failing test too), and the namespace
//! ends with its thread; a killed test process takes both with it.

use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};

/// The nftables table that drops everything while it exists.
const TABLE: &str = "flower_drop";

type InNamespace = Box<dyn FnOnce() + Send>;

/// A veth pair into a namespace of its own, whose traffic can be dropped.
pub struct DroppingLink {
    /// The host side's interface name (deleting it deletes the pair).
    host_if: Option<String>,
    /// The namespace, as `nsenter --net=` takes it.
    ns_path: String,
    /// The namespace side's address.
    pub ns_ip: Ipv4Addr,
    /// Runs closures on the thread that lives in the namespace; dropped to end it.
    in_ns: Option<mpsc::Sender<InNamespace>>,
    holder: Option<std::thread::JoinHandle<()>>,
    forwarders: Vec<Forwarder>,
}

struct Forwarder {
    at: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

/// Runs `program args…`, `Err` with what it said when it fails.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn have(program: &str, version_flag: &str) -> bool {
    Command::new(program)
        .arg(version_flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn skip(why: &str) -> Option<DroppingLink> {
    super::skip::skip(super::skip::NETNS, why);
    None
}

impl DroppingLink {
    /// A new link, or `None` (the calling test counted as skipped) when this machine
    /// cannot make one.
    pub fn new() -> Option<DroppingLink> {
        DroppingLink::make(false)
    }

    /// A link whose namespace side has an address of a documentation range (TEST-NET-2
    /// or -3), which flower's network proxy counts as public: "the internet" for the
    /// proxy's tests.
    pub fn public() -> Option<DroppingLink> {
        DroppingLink::make(true)
    }

    fn make(public: bool) -> Option<DroppingLink> {
        // SAFETY: geteuid only reads.
        if unsafe { libc::geteuid() } != 0 {
            return skip("not root: a network namespace and a veth pair need CAP_NET_ADMIN");
        }
        for (program, flag, package) in [
            ("ip", "-V", "iproute2"),
            ("nsenter", "--version", "util-linux"),
            ("nft", "--version", "nftables"),
        ] {
            // A public link only forwards; it never drops.
            let needed = !(public && program == "nft");
            if needed && !have(program, flag) {
                return skip(&format!("no `{program}` ({package} is not installed)"));
            }
        }
        // The namespace: a thread that unshares its network namespace (only its own)
        // and then serves closures that must run inside it.
        let (ready_tx, ready_rx) = mpsc::channel::<Result<i32, String>>();
        let (in_ns, jobs) = mpsc::channel::<InNamespace>();
        let holder = std::thread::spawn(move || {
            // SAFETY: unshare and gettid act on this thread only.
            let tid = unsafe {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    let _ = ready_tx.send(Err(format!(
                        "unshare(CLONE_NEWNET): {}",
                        std::io::Error::last_os_error()
                    )));
                    return;
                }
                libc::gettid()
            };
            let _ = ready_tx.send(Ok(tid));
            for job in jobs {
                job();
            }
        });
        let tid = match ready_rx.recv() {
            Ok(Ok(tid)) => tid,
            Ok(Err(why)) => return skip(&why),
            Err(_) => return skip("the namespace thread died"),
        };
        static LINKS: AtomicU32 = AtomicU32::new(0);
        let n = LINKS.fetch_add(1, Ordering::Relaxed);
        let base = format!("fl{:06x}{:02x}", std::process::id() & 0xff_ffff, n & 0xff);
        let mut link = DroppingLink {
            host_if: None,
            ns_path: format!("/proc/{}/task/{tid}/ns/net", std::process::id()),
            ns_ip: Ipv4Addr::UNSPECIFIED,
            in_ns: Some(in_ns),
            holder: Some(holder),
            forwarders: Vec::new(),
        };
        if let Err(why) = link.set_up(&base, tid, public) {
            return skip(&why);
        }
        Some(link)
    }

    fn set_up(&mut self, base: &str, tid: i32, public: bool) -> Result<(), String> {
        let (host_if, ns_if) = (format!("{base}h"), format!("{base}n"));
        let tid = tid.to_string();
        run(
            "ip",
            &[
                "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &tid,
            ],
        )?;
        self.host_if = Some(host_if.clone());
        // A /30 of 10.0.0.0/8 no route of the host covers yet.
        let subnet = (0..64)
            .map(|_| {
                let r = uuid::Uuid::new_v4().as_u128() as u32;
                if public {
                    let [a, b, c] = if r & 0x100 == 0 {
                        [198, 51, 100]
                    } else {
                        [203, 0, 113]
                    };
                    return Ipv4Addr::new(a, b, c, (r as u8) & 0xfc);
                }
                Ipv4Addr::new(
                    10,
                    200 + (r % 50) as u8,
                    (r >> 8) as u8,
                    ((r >> 16) as u8) & 0xfc,
                )
            })
            .find(|net| {
                Command::new("ip")
                    .args(["-4", "route", "show", "match", &format!("{net}/30")])
                    .output()
                    .is_ok_and(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .lines()
                            .all(|route| route.starts_with("default"))
                    })
            })
            .ok_or("no free 10.x /30 subnet")?;
        let [a, b, c, d] = subnet.octets();
        let host_ip = Ipv4Addr::new(a, b, c, d + 1);
        self.ns_ip = Ipv4Addr::new(a, b, c, d + 2);
        run(
            "ip",
            &["addr", "add", &format!("{host_ip}/30"), "dev", &host_if],
        )?;
        run("ip", &["link", "set", &host_if, "up"])?;
        let net = format!("--net={}", self.ns_path);
        let ns_addr = format!("{}/30", self.ns_ip);
        for args in [
            ["ip", "addr", "add", ns_addr.as_str(), "dev", ns_if.as_str()].as_slice(),
            &["ip", "link", "set", &ns_if, "up"],
            &["ip", "link", "set", "lo", "up"],
        ] {
            let mut all = vec![net.as_str()];
            all.extend_from_slice(args);
            run("nsenter", &all)?;
        }
        Ok(())
    }

    /// Listens inside the namespace (on [`Self::ns_ip`]) and copies each connection to
    /// `target` (a server of the host); returns where it listens.
    pub fn forward(&mut self, target: SocketAddr) -> SocketAddr {
        let (tx, rx) = mpsc::channel();
        let ip = self.ns_ip;
        let job: InNamespace = Box::new(move || {
            let _ = tx.send(TcpListener::bind(SocketAddrV4::new(ip, 0)));
        });
        self.in_ns.as_ref().unwrap().send(job).unwrap();
        // A socket stays in the namespace it was made in, whichever thread uses it.
        let listener = rx.recv().unwrap().unwrap();
        let at = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (stopped, all) = (stop.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let mut list = all.lock().unwrap();
                list.push(client.try_clone().unwrap());
                list.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        self.forwarders.push(Forwarder { at, stop, conns });
        at
    }

    /// From now on the namespace drops every packet, both ways, and says nothing.
    pub fn drop_packets(&self) {
        self.install(
            "chain input { type filter hook input priority -300; policy accept; counter drop; }\n\
             chain output { type filter hook output priority -300; policy accept; counter drop; }",
        );
    }

    /// From now on the namespace drops every packet coming in but bare TCP
    /// acknowledgements (no data: no longer than a header with timestamps; no SYN, FIN
    /// or RST): what the host sends is lost, its acknowledgements and everything going
    /// out pass. The host sees its answers arrive, but its next request never does,
    /// nor its closing.
    pub fn drop_data_coming_in(&self) {
        self.install(
            "chain input { type filter hook input priority -300; policy accept; \
             ip length > 52 counter drop; tcp flags != ack counter drop; }",
        );
    }

    fn install(&self, chains: &str) {
        let rules = format!("table inet {TABLE} {{\n{chains}\n}}\n");
        let mut child = Command::new("nsenter")
            .args([&format!("--net={}", self.ns_path), "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), rules.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "nft: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// How many packets the namespace has dropped since [`Self::drop_packets`].
    pub fn dropped(&self) -> u64 {
        let out = Command::new("nsenter")
            .args([
                &format!("--net={}", self.ns_path),
                "nft",
                "list",
                "table",
                "inet",
                TABLE,
            ])
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        listing
            .split("counter packets ")
            .skip(1)
            .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }

    /// The host side's address (the namespace side's, less one).
    pub fn host_ip(&self) -> Ipv4Addr {
        let [a, b, c, d] = self.ns_ip.octets();
        Ipv4Addr::new(a, b, c, d - 1)
    }

    /// Gives the host side an IPv6 address of the documentation range (which flower's
    /// proxy counts as public) and returns it; `None` where IPv6 is off.
    pub fn host_ipv6(&self) -> Option<std::net::Ipv6Addr> {
        let host_if = self.host_if.as_deref()?;
        let [_, _, c, d] = self.ns_ip.octets();
        let ip = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0xf1, 0, 0, 0, u16::from(c), u16::from(d));
        run(
            "ip",
            &[
                "-6",
                "addr",
                "add",
                &format!("{ip}/128"),
                "dev",
                host_if,
                "nodad",
            ],
        )
        .ok()?;
        Some(ip)
    }

    /// Packets pass again.
    pub fn restore(&self) {
        run(
            "nsenter",
            &[
                &format!("--net={}", self.ns_path),
                "nft",
                "delete",
                "table",
                "inet",
                TABLE,
            ],
        )
        .unwrap();
    }
}

impl Drop for DroppingLink {
    fn drop(&mut self) {
        // Drops lifted first, so that waking the acceptors below is immediate.
        let _ = Command::new("nsenter")
            .args([
                &format!("--net={}", self.ns_path),
                "nft",
                "delete",
                "table",
                "inet",
                TABLE,
            ])
            .stderr(Stdio::null())
            .status();
        for f in self.forwarders.drain(..) {
            f.stop.store(true, Ordering::SeqCst);
            for conn in f.conns.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
                let _ = conn.shutdown(Shutdown::Both);
            }
            // Wakes the acceptor, which then closes its listener (and with it the
            // last socket of the namespace).
            let _ = TcpStream::connect_timeout(&f.at, std::time::Duration::from_secs(2));
        }
        if let Some(host_if) = self.host_if.take() {
            let _ = run("ip", &["link", "del", &host_if]);
        }
        // The namespace's last thread ends: the namespace goes with it.
        self.in_ns.take();
        if let Some(holder) = self.holder.take() {
            let _ = holder.join();
        }
    }
}
