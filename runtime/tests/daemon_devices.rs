//! One daemon, two devices, no GPU: the daemon arbitrates each device's pool on its own. Clients
//! connect over the real socket and shared-memory rings from threads of this test (the
//! multi-process paths are tests/daemon_processes.rs). Every wait has a deadline.

use std::time::{Duration, Instant};

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, Topology};
use vitamin_runtime::daemon::client::{self, Binding, ConnectOptions, DaemonClient};
use vitamin_runtime::daemon::now_ns;
use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::daemon::wire::{kernel_hash, ReadyRecord};
use vitamin_runtime::policy::{ClientClass, PolicyKind};

fn start(tag: &str, policy: PolicyKind) -> Daemon {
    let dir = std::env::temp_dir().join(format!("vitamin-dd-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = DaemonConfig::new(dir.join("daemon.sock"));
    cfg.decide.policy = policy;
    Daemon::start(cfg).expect("daemon starts")
}

fn connect(d: &Daemon, name: &str, device: u32, topology: Topology) -> Result<DaemonClient, String> {
    DaemonClient::connect(ConnectOptions {
        socket: d.socket().to_path_buf(),
        name: name.into(),
        device,
        topology,
        class: ClientClass::BestEffort,
        lanes: 2,
        timeout: Duration::from_secs(5),
    })
    .map_err(|e| e.to_string())
}

fn ready(c: &mut DaemonClient, op: u64) {
    let r = ReadyRecord {
        op,
        flags: 0,
        min_units: 0,
        kernel: kernel_hash("vector_add"),
        grid: [256, 1, 1],
        block: [256, 1, 1],
        smem: 0,
        resident_per_unit: 0,
        ready_since_ns: now_ns(),
        deadline_ns: None,
    };
    assert!(c.ready(r).unwrap(), "up ring full");
    c.flush();
}

/// The bindings `c` receives within `limit`.
fn bindings_within(c: &mut DaemonClient, limit: Duration) -> Vec<Binding> {
    let (t, mut got) = (Instant::now(), Vec::new());
    while got.is_empty() && t.elapsed() < limit {
        c.bindings(&mut got, Duration::from_millis(20)).unwrap();
    }
    got
}

#[test]
fn each_device_s_pool_is_arbitrated_on_its_own_and_reported() {
    // Exclusive: one client holds a device's whole pool at a time.
    let d = start("two", PolicyKind::Exclusive);
    let (h200, mi300x) = (
        SimBackend::preset("h200").unwrap().topology().clone(),
        SimBackend::preset("mi300x").unwrap().topology().clone(),
    );
    let mut a = connect(&d, "a-dev0", 0, h200.clone()).expect("a");
    let mut b = connect(&d, "b-dev1", 1, mi300x.clone()).expect("b");
    let mut c = connect(&d, "c-dev0", 0, h200.clone()).expect("c");

    ready(&mut a, 1);
    let got_a = bindings_within(&mut a, Duration::from_secs(5));
    assert_eq!(got_a.len(), 1, "a is bound on device 0");
    // While a holds device 0's whole pool, device 1 is untouched: b is bound at once there, and c
    // (device 0) waits for a.
    ready(&mut b, 1);
    ready(&mut c, 1);
    let got_b = bindings_within(&mut b, Duration::from_secs(5));
    assert_eq!(got_b.len(), 1, "b is bound on device 1 although device 0 is held");
    assert!(bindings_within(&mut c, Duration::from_millis(300)).is_empty(), "c waits for a's lease on device 0");

    let st = client::status(d.socket(), Duration::from_secs(5)).expect("status");
    assert_eq!(st.devices.len(), 2, "{st:?}");
    let dev = |i: u32| st.devices.iter().find(|x| x.device == i).unwrap_or_else(|| panic!("device {i}: {st:?}"));
    assert_eq!(dev(0).units, h200.unit_count());
    assert_eq!(dev(1).units, mi300x.unit_count());
    assert_eq!(dev(0).units_in_use, h200.unit_count(), "a holds device 0 whole");
    assert_eq!(dev(1).units_in_use, mi300x.unit_count(), "b holds device 1 whole");

    assert!(a.complete(got_a[0].op, now_ns()).unwrap());
    a.flush();
    assert_eq!(bindings_within(&mut c, Duration::from_secs(5)).len(), 1, "c gets device 0 after a");
    assert!(b.complete(got_b[0].op, now_ns()).unwrap());
    b.flush();

    // A client reporting another topology for a registered device is refused, not merged.
    let Err(err) = connect(&d, "wrong", 1, h200) else { panic!("a mismatched topology is refused") };
    assert!(err.contains("device 1"), "{err}");
    d.shutdown();
}

/// Each client's lease view marks the nodes another client of the same device holds `Foreign`
/// (and its own `Open`), so a client sees what is free without a round trip; a client of another
/// device sees none of them.
#[test]
fn lease_views_mark_other_clients_nodes_foreign() {
    use vitamin_runtime::daemon::wire::LeaseState;

    let d = start("foreign", PolicyKind::Exclusive);
    let h200 = SimBackend::preset("h200").unwrap().topology().clone();
    let mi300x = SimBackend::preset("mi300x").unwrap().topology().clone();
    let mut a = connect(&d, "a", 0, h200.clone()).expect("a");
    let c = connect(&d, "c", 0, h200).expect("c");
    let b = connect(&d, "b", 1, mi300x).expect("b");
    ready(&mut a, 1);
    let got = bindings_within(&mut a, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "a is bound");
    let node = usize::from(got[0].node);
    let mut view = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        c.lease_view(&mut view).unwrap();
        if view.get(node) == Some(&LeaseState::Foreign) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(view[node], LeaseState::Foreign, "c sees a's node as held by another client");
    assert_eq!(view.iter().filter(|s| **s == LeaseState::Foreign).count(), 1, "only a's node: {view:?}");
    a.lease_view(&mut view).unwrap();
    assert_eq!(view[node], LeaseState::Open, "a sees its own lease open");
    assert!(!view.contains(&LeaseState::Foreign), "nobody else holds anything: {view:?}");
    b.lease_view(&mut view).unwrap();
    assert!(!view.contains(&LeaseState::Foreign), "another device's client sees none of device 0's leases");
}
