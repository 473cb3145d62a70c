//! The fault plan: which operation fails when, and the simulated timing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use offload_core::{Error, ErrorCode, Result};

/// Kinds of operations a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Init,
    Alloc,
    Free,
    Load,
    Queue,
    H2d,
    D2h,
    D2d,
    Fill,
    Launch,
    Sync,
}

const OPS: [(Op, &str); 11] = [
    (Op::Init, "init"),
    (Op::Alloc, "alloc"),
    (Op::Free, "free"),
    (Op::Load, "load"),
    (Op::Queue, "queue"),
    (Op::H2d, "h2d"),
    (Op::D2h, "d2h"),
    (Op::D2d, "d2d"),
    (Op::Fill, "fill"),
    (Op::Launch, "launch"),
    (Op::Sync, "sync"),
];

impl Op {
    fn name(self) -> &'static str {
        OPS.iter()
            .find(|(o, _)| *o == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }
    fn index(self) -> usize {
        OPS.iter().position(|(o, _)| *o == self).unwrap_or(0)
    }
    fn is_copy(self) -> bool {
        matches!(self, Op::H2d | Op::D2h | Op::D2d)
    }
    /// The error code a real device would give for this failure.
    fn code(self) -> ErrorCode {
        match self {
            Op::Alloc => ErrorCode::OutOfResources,
            Op::Load => ErrorCode::InvalidBinary,
            _ => ErrorCode::BackendFailure,
        }
    }
}

/// One rule: fail the `nth` operation of a kind (and later ones if `onwards`).
#[derive(Debug, Clone, Copy)]
struct Rule {
    /// None: any copy.
    op: Option<Op>,
    nth: u64,
    onwards: bool,
}

#[derive(Debug, Default)]
pub struct FaultPlan {
    rules: Vec<Rule>,
    counts: [AtomicU64; 11],
    copies: AtomicU64,
    latency: Duration,
    /// Bytes per microsecond (= MB/s); 0 = unlimited.
    bandwidth: u64,
}

impl FaultPlan {
    /// The plan in `OFFLOAD_SIM_FAULTS`, `OFFLOAD_SIM_LATENCY_US` and
    /// `OFFLOAD_SIM_BANDWIDTH_MBS`; a malformed value is an error naming it.
    pub fn from_env() -> Result<FaultPlan> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut plan = match var("OFFLOAD_SIM_FAULTS") {
            Some(spec) => FaultPlan::parse(&spec)?,
            None => FaultPlan::default(),
        };
        let num = |k: &str| -> Result<u64> {
            var(k)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| Error::invalid_argument(format!("{k}={v} is not a number")))
                })
                .transpose()
                .map(|v| v.unwrap_or(0))
        };
        plan.latency = Duration::from_micros(num("OFFLOAD_SIM_LATENCY_US")?);
        plan.bandwidth = num("OFFLOAD_SIM_BANDWIDTH_MBS")?;
        Ok(plan)
    }

    /// Parse `op:N[+],...`.
    pub fn parse(spec: &str) -> Result<FaultPlan> {
        let mut rules = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || {
                Error::invalid_argument(format!(
                    "OFFLOAD_SIM_FAULTS: '{item}' is not OP:N or OP:N+ (OP one of init, alloc, free, load, queue, copy, h2d, d2h, d2d, fill, launch, sync)"
                ))
            };
            let (name, n) = item.split_once(':').ok_or_else(bad)?;
            let (n, onwards) = match n.strip_suffix('+') {
                Some(n) => (n, true),
                None => (n, false),
            };
            let nth: u64 = n.trim().parse().map_err(|_| bad())?;
            if nth == 0 {
                return Err(bad());
            }
            let op = match name.trim() {
                "copy" => None,
                other => Some(
                    OPS.iter()
                        .find(|(_, n)| *n == other)
                        .map(|(o, _)| *o)
                        .ok_or_else(bad)?,
                ),
            };
            rules.push(Rule { op, nth, onwards });
        }
        Ok(FaultPlan {
            rules,
            ..FaultPlan::default()
        })
    }

    /// Count one `op`; fail it if a rule says so.
    pub fn check(&self, op: Op) -> Result<()> {
        let n = self.counts[op.index()].fetch_add(1, Ordering::Relaxed) + 1;
        let copy_n = if op.is_copy() {
            self.copies.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            0
        };
        for r in &self.rules {
            let count = match r.op {
                Some(o) if o == op => n,
                None if op.is_copy() => copy_n,
                _ => continue,
            };
            if count == r.nth || (r.onwards && count > r.nth) {
                return Err(Error::new(
                    op.code(),
                    format!(
                        "simulated device: injected failure of {} #{count} (OFFLOAD_SIM_FAULTS)",
                        op.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Sleep for the simulated cost of an operation moving `bytes`.
    pub fn delay(&self, bytes: usize) {
        let mut t = self.latency;
        if let Some(us) = (bytes as u64).checked_div(self.bandwidth) {
            t += Duration::from_micros(us);
        }
        if !t.is_zero() {
            std::thread::sleep(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_and_onwards() {
        let p = FaultPlan::parse("alloc:2, launch:1+, copy:3").unwrap();
        assert!(p.check(Op::Alloc).is_ok());
        let e = p.check(Op::Alloc).unwrap_err();
        assert_eq!(e.code(), ErrorCode::OutOfResources);
        assert!(e.message().contains("alloc #2"), "{e}");
        assert!(p.check(Op::Alloc).is_ok());
        assert!(p.check(Op::Launch).is_err());
        assert!(p.check(Op::Launch).is_err());
        assert!(p.check(Op::H2d).is_ok());
        assert!(p.check(Op::D2h).is_ok());
        assert!(p.check(Op::D2d).is_err(), "third copy of any kind");
        assert!(p.check(Op::Fill).is_ok());
    }

    #[test]
    fn malformed_specs_are_errors() {
        for bad in ["alloc", "alloc:x", "alloc:0", "frobnicate:1", "alloc:1++"] {
            let e = FaultPlan::parse(bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArgument, "{bad}");
            assert!(e.message().contains("OFFLOAD_SIM_FAULTS"), "{bad}: {e}");
        }
        assert!(FaultPlan::parse("").unwrap().rules.is_empty());
    }
}
