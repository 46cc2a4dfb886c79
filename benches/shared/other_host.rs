//! "Another host" for the network benches: a network namespace of its own joined to
//! this process's by a veth pair, the far side with a TEST-NET address (which flower's
//! proxy counts as public, as it does the internet). A download from it crosses a real
//! link (a device pair, each side's own TCP stack) instead of the host's loopback, and
//! the link can be shaped to a real link's rate with `tc qdisc … tbf`.
//!
//! Needs root (CAP_NET_ADMIN), `ip`, `nsenter` and `tc`; [`OtherHost::new`] says why
//! not otherwise. The namespace lives as long as a thread of this process that stays in
//! it (and the listening socket made there); the pair is deleted on drop.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::process::{Command, Stdio};
use std::sync::mpsc;

pub struct OtherHost {
    host_if: String,
    ns_if: String,
    ns_path: String,
    /// The far side's address.
    pub ip: Ipv4Addr,
    /// Ends the thread that keeps the namespace.
    keep: Option<mpsc::Sender<()>>,
    holder: Option<std::thread::JoinHandle<()>>,
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

impl OtherHost {
    /// A new host and a listening socket on it, or why this machine cannot make one.
    pub fn new() -> Result<(OtherHost, TcpListener), String> {
        // SAFETY: geteuid only reads.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: a network namespace and a veth pair need CAP_NET_ADMIN".into());
        }
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(i32, TcpListener), String>>();
        let (keep, kept) = mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            // SAFETY: unshare and gettid act on this thread only.
            let tid = unsafe {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    let why = std::io::Error::last_os_error();
                    let _ = ready_tx.send(Err(format!("unshare(CLONE_NEWNET): {why}")));
                    return;
                }
                libc::gettid()
            };
            // A socket stays in the namespace it was made in, whichever thread uses it.
            let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
                .map_err(|e| format!("bind in the namespace: {e}"));
            let _ = ready_tx.send(listener.map(|l| (tid, l)));
            let _ = kept.recv();
        });
        let (tid, listener) = ready_rx
            .recv()
            .map_err(|_| "the namespace thread died".to_string())??;
        let base = format!("flb{:06x}", std::process::id() & 0xff_ffff);
        let mut host = OtherHost {
            host_if: format!("{base}h"),
            ns_if: format!("{base}n"),
            ns_path: format!("/proc/{}/task/{tid}/ns/net", std::process::id()),
            ip: Ipv4Addr::UNSPECIFIED,
            keep: Some(keep),
            holder: Some(holder),
        };
        host.set_up(tid)?;
        Ok((host, listener))
    }

    fn set_up(&mut self, tid: i32) -> Result<(), String> {
        let tid = tid.to_string();
        let (host_if, ns_if) = (self.host_if.clone(), self.ns_if.clone());
        run(
            "ip",
            &[
                "link", "add", "name", &host_if, "type", "veth", "peer", "name", &ns_if, "netns",
                &tid,
            ],
        )?;
        // A /30 of TEST-NET-2 no route of the host covers yet.
        let subnet = (0..64u8)
            .map(|k| Ipv4Addr::new(198, 51, 100, (std::process::id() as u8 ^ k) & 0xfc))
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
            .ok_or("no free /30 in 198.51.100.0/24")?;
        let [a, b, c, d] = subnet.octets();
        let host_ip = format!("{}/30", Ipv4Addr::new(a, b, c, d + 1));
        self.ip = Ipv4Addr::new(a, b, c, d + 2);
        run("ip", &["addr", "add", &host_ip, "dev", &host_if])?;
        run("ip", &["link", "set", &host_if, "up"])?;
        let ns_addr = format!("{}/30", self.ip);
        self.in_ns(&["ip", "addr", "add", &ns_addr, "dev", &ns_if])?;
        self.in_ns(&["ip", "link", "set", &ns_if, "up"])
    }

    fn in_ns(&self, args: &[&str]) -> Result<(), String> {
        let net = format!("--net={}", self.ns_path);
        let mut all = vec![net.as_str()];
        all.extend_from_slice(args);
        run("nsenter", &all)
    }

    /// Shapes what the host sends to `rate` (`tc` units: `1gbit`), or takes the shaping
    /// off (`None`). The bucket holds 2 ms at the rate and at least a few 64 KiB
    /// segments (the pair offloads segmentation), so the shaper never splits them.
    pub fn shape(&self, rate: Option<(&str, u64)>) -> Result<(), String> {
        let _ = self.in_ns(&["tc", "qdisc", "del", "dev", &self.ns_if, "root"]);
        let Some((rate, bits_per_s)) = rate else {
            return Ok(());
        };
        let burst = (bits_per_s / 8 / 500).max(256 * 1024).to_string();
        self.in_ns(&[
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.ns_if,
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            &burst,
            "latency",
            "20ms",
        ])
    }
}

impl Drop for OtherHost {
    fn drop(&mut self) {
        let _ = run("ip", &["link", "del", &self.host_if]);
        self.keep.take();
        if let Some(holder) = self.holder.take() {
            let _ = holder.join();
        }
    }
}
