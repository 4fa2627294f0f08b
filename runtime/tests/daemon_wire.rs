//! Property tests of the daemon's record decoder and ledger.
//!
//! - Arbitrary words (random, mutated valid records, and random fields under a correct checksum):
//!   the decoder never panics, and whatever it accepts re-encodes to exactly the same words (one encoding per value, so a torn or altered record can never decode to the
//!   value that was meant). 10^5 cases in CI; `decoder_fuzz_10m` (ignored) runs 10^7:
//!   `cargo test -p vitamin-runtime --release --test daemon_wire -- --ignored`.
//! - Valid records round-trip; single-bit flips never decode to the original.
//! - The ledger agrees with a reference model over random op histories.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use vitamin_runtime::daemon::wire::{
    checksum, decode_up, kernel_hash, HintRecord, Ledger, Limits, ReadyRecord, Up, WireError, UP_WORDS,
};

const LIM: Limits = Limits { nodes: 59, lanes: 4, units: 132, max_ready: 8, max_outstanding: 6 };

fn arb_up() -> impl Strategy<Value = Up> {
    let dims = prop::array::uniform3(1u32..=65535);
    prop_oneof![
        (
            any::<u64>(),
            0u8..8,
            0u16..=132,
            any::<u64>(),
            dims.clone(),
            dims.clone(),
            (any::<u32>(), any::<u16>()),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(op, flags, min, k, grid, block, (smem, resident), t, d)| Up::Ready(ReadyRecord {
                op,
                flags,
                min_units: min,
                kernel: k,
                grid,
                block,
                smem,
                resident_per_unit: resident,
                ready_since_ns: t,
                deadline_ns: (d != 0).then_some(d),
            })),
        (any::<u64>(), 0u16..59, any::<u64>(), any::<bool>()).prop_map(|(op, node, t, not_run)| Up::Completion {
            op,
            node,
            completed_ns: t,
            not_run
        }),
        (any::<u64>(), 0u16..59, 0u16..4, any::<u64>(), any::<bool>())
            .prop_map(|(op, node, lane, t, graph)| { Up::Launched { op, node, lane, submitted_ns: t, graph } }),
        (any::<u64>(), 0u16..59, 0u16..4, any::<u64>(), any::<bool>())
            .prop_map(|(op, node, lane, t, graph)| { Up::Continued { op, node, lane, submitted_ns: t, graph } }),
        (any::<u64>(), any::<u64>(), 0u16..=132, any::<u64>(), any::<u64>()).prop_map(|(op, k, dem, t, d)| Up::Hint(
            HintRecord {
                op,
                kernel: k,
                grid: [0; 3],
                block: [0; 3],
                demand_units: dem,
                ready_at_ns: t,
                deadline_ns: (d != 0).then_some(d)
            }
        )),
    ]
}

/// Random words with a known kind and a correct checksum: they get past the checksum, so the
/// field checks behind it are exercised.
fn sealed(mut w: [u64; UP_WORDS], kind: u64) -> [u64; UP_WORDS] {
    w[0] = (w[0] & 0xffff_ff00) | kind;
    w[0] |= u64::from(checksum(&w)) << 32;
    w
}

/// Words that are often almost valid: a valid record with some words or bits replaced, or random
/// fields under a correct checksum.
fn arb_words() -> impl Strategy<Value = [u64; UP_WORDS]> {
    prop_oneof![
        prop::array::uniform9(any::<u64>()),
        (prop::array::uniform9(any::<u64>()), 1u64..=4).prop_map(|(w, k)| sealed(w, k)),
        (arb_up(), 0usize..UP_WORDS, any::<u64>()).prop_map(|(u, i, w)| {
            let mut words = u.encode().to_words();
            words[i] = w;
            sealed(words, words[0] & 0xff)
        }),
        (arb_up(), 0usize..UP_WORDS, any::<u64>()).prop_map(|(u, i, w)| {
            let mut words = u.encode().to_words();
            words[i] = w;
            words
        }),
        (arb_up(), 0usize..UP_WORDS, 0u32..64).prop_map(|(u, i, b)| {
            let mut words = u.encode().to_words();
            words[i] ^= 1 << b;
            words
        }),
        arb_up().prop_map(|u| u.encode().to_words()),
    ]
}

fn check_canonical(words: &[u64; UP_WORDS]) -> Result<(), String> {
    if let Ok(up) = decode_up(words, &LIM) {
        let again = up.encode().to_words();
        if &again != words {
            return Err(format!("{words:x?} decoded to {up:?}, which encodes to {again:x?}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, ..ProptestConfig::default() })]

    #[test]
    fn accepted_words_are_canonical(words in arb_words()) {
        check_canonical(&words).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn valid_records_round_trip_and_flips_never_alias(up in arb_up(), word in 0usize..UP_WORDS, bit in 0u32..64) {
        let w = up.encode().to_words();
        prop_assert_eq!(decode_up(&w, &LIM), Ok(up));
        let mut flipped = w;
        flipped[word] ^= 1 << bit;
        prop_assert_ne!(decode_up(&flipped, &LIM), Ok(up));
    }
}

/// Reference model of the ledger: plain vectors.
#[derive(Default)]
struct Model {
    ready: Vec<u64>,
    outstanding: Vec<(u64, u16, u16)>,
}

#[derive(Debug, Clone)]
enum Step {
    Ready(u64),
    Bind(u64, u16, u16),
    Complete(u64, u16),
    Continue(u64, u16, u16),
    Launch(u64, u16, u16),
}

fn arb_step() -> impl Strategy<Value = Step> {
    // Small id and place ranges so histories collide often.
    prop_oneof![
        (0u64..12).prop_map(Step::Ready),
        (0u64..12, 0u16..3, 0u16..2).prop_map(|(o, n, l)| Step::Bind(o, n, l)),
        (0u64..12, 0u16..3).prop_map(|(o, n)| Step::Complete(o, n)),
        (0u64..12, 0u16..3, 0u16..2).prop_map(|(o, n, l)| Step::Continue(o, n, l)),
        (0u64..12, 0u16..3, 0u16..2).prop_map(|(o, n, l)| Step::Launch(o, n, l)),
    ]
}

fn ready(op: u64) -> Up {
    Up::Ready(ReadyRecord {
        op,
        flags: 0,
        min_units: 8,
        kernel: kernel_hash("k"),
        grid: [1, 1, 1],
        block: [32, 1, 1],
        smem: 0,
        resident_per_unit: 0,
        ready_since_ns: 1,
        deadline_ns: None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, ..ProptestConfig::default() })]

    #[test]
    fn ledger_matches_the_model(steps in prop::collection::vec(arb_step(), 1..60)) {
        let mut l = Ledger::new(LIM);
        let mut m = Model::default();
        for s in steps {
            let known = |m: &Model, op| m.ready.contains(&op) || m.outstanding.iter().any(|o| o.0 == op);
            match s {
                Step::Ready(op) => {
                    let want = if m.ready.len() as u32 >= LIM.max_ready {
                        Err(WireError::TooManyReady(LIM.max_ready))
                    } else if known(&m, op) {
                        Err(WireError::DuplicateOp(op))
                    } else {
                        m.ready.push(op);
                        Ok(())
                    };
                    prop_assert_eq!(l.accept(&ready(op).encode().to_words()).map(|_| ()), want);
                }
                Step::Bind(op, n, lane) => {
                    let ok = m.ready.contains(&op) && (m.outstanding.len() as u32) < LIM.max_outstanding;
                    if ok {
                        m.ready.retain(|&r| r != op);
                        m.outstanding.push((op, n, lane));
                    }
                    prop_assert_eq!(l.bind(op, n, lane), ok);
                }
                Step::Complete(op, n) => {
                    let want = match m.outstanding.iter().position(|o| o.0 == op) {
                        None => Err(WireError::UnknownOp(op)),
                        Some(i) if m.outstanding[i].1 != n => {
                            Err(WireError::WrongNode { op, got: n, want: m.outstanding[i].1 })
                        }
                        Some(i) => {
                            m.outstanding.remove(i);
                            Ok(())
                        }
                    };
                    let w = Up::Completion { op, node: n, completed_ns: 0, not_run: false }.encode().to_words();
                    prop_assert_eq!(l.accept(&w).map(|_| ()), want);
                }
                Step::Continue(op, n, lane) => {
                    let want = if known(&m, op) {
                        Err(WireError::DuplicateOp(op))
                    } else if !m.outstanding.iter().any(|o| (o.1, o.2) == (n, lane)) {
                        Err(WireError::NotContinuable { op, node: n, lane })
                    } else if m.outstanding.len() as u32 >= LIM.max_outstanding {
                        Err(WireError::TooManyOutstanding(LIM.max_outstanding))
                    } else {
                        m.outstanding.push((op, n, lane));
                        Ok(())
                    };
                    let w = Up::Continued { op, node: n, lane, submitted_ns: 0, graph: false }.encode().to_words();
                    prop_assert_eq!(l.accept(&w).map(|_| ()), want);
                }
                Step::Launch(op, n, lane) => {
                    // Launch-first needs no outstanding op on the lane (the lease view decided).
                    let want = if known(&m, op) {
                        Err(WireError::DuplicateOp(op))
                    } else if m.outstanding.len() as u32 >= LIM.max_outstanding {
                        Err(WireError::TooManyOutstanding(LIM.max_outstanding))
                    } else {
                        m.outstanding.push((op, n, lane));
                        Ok(())
                    };
                    let w = Up::Launched { op, node: n, lane, submitted_ns: 0, graph: false }.encode().to_words();
                    prop_assert_eq!(l.accept(&w).map(|_| ()), want);
                }
            }
            prop_assert_eq!(l.ready() as usize, m.ready.len());
            prop_assert_eq!(l.outstanding() as usize, m.outstanding.len());
        }
    }
}

/// 10^7 decoder cases (random words and mutated valid records), with a seeded generator.
#[test]
#[ignore = "10^7 cases: run with --release -- --ignored"]
fn decoder_fuzz_10m() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed);
    let valid = [
        ready(3).encode().to_words(),
        Up::Completion { op: 9, node: 58, completed_ns: 4, not_run: false }.encode().to_words(),
        Up::Continued { op: 9, node: 1, lane: 3, submitted_ns: 4, graph: false }.encode().to_words(),
        Up::Launched { op: 9, node: 1, lane: 3, submitted_ns: 4, graph: false }.encode().to_words(),
    ];
    let mut accepted = 0u64;
    for i in 0..10_000_000u64 {
        let mut w: [u64; UP_WORDS] = match i % 4 {
            0 => std::array::from_fn(|_| rng.gen()),
            _ => valid[rng.gen_range(0..valid.len())],
        };
        if i % 4 != 0 {
            let j = rng.gen_range(0..UP_WORDS);
            if i % 4 == 1 {
                w[j] ^= 1 << rng.gen_range(0..64);
            } else {
                w[j] = rng.gen();
            }
            if i % 4 == 3 {
                // A changed field under a correct checksum: the field checks decide.
                w = sealed(w, w[0] & 0xff);
            }
        }
        if let Err(e) = check_canonical(&w) {
            panic!("case {i}: {e}");
        }
        accepted += u64::from(decode_up(&w, &LIM).is_ok());
    }
    println!("10^7 decoder cases, {accepted} accepted, all canonical");
}
