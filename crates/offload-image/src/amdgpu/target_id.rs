//! AMD GPU target IDs: a processor and the settings of its `xnack` and
//! `sramecc` features (`gfx90a:sramecc+:xnack-`), as clang's
//! `--offload-arch` takes them, as the HSA runtime names an agent's ISA,
//! and as code objects say them in `e_flags` (fully from version 4).
//!
//! A code object runs on an agent when the processors are equal and each
//! feature the code object turns on (`+`) or off (`-`) is set the same way
//! on the agent; a feature the code object leaves to "any" matches every
//! agent. That is the rule of the HSA runtime's loader and of LLVM's
//! plugin. Code built for one of LLVM's generic processors
//! (`gfx11-generic`) runs on every processor of its family, under the same
//! feature rule: an HSA runtime that can load such code lists the family's
//! generic ISA beside the agent's own (`gfx1100`, then `gfx11-generic`),
//! and one that does not list it cannot load it.

use std::fmt;

/// `EF_AMDGPU_FEATURE_XNACK_V4`: the bits of the `xnack` setting.
const XNACK_V4: u32 = 0x300;
/// `EF_AMDGPU_FEATURE_SRAMECC_V4`: the bits of the `sramecc` setting.
const SRAMECC_V4: u32 = 0xc00;
/// `EI_ABIVERSION` of code object version 4 (`ELFABIVERSION_AMDGPU_HSA_V4`);
/// versions 5 and 6 are 3 and 4, with the same feature bits.
const ABI_VERSION_V4: u8 = 2;
/// `EI_ABIVERSION` of code object version 3, whose `e_flags` have one bit
/// per feature (`EF_AMDGPU_FEATURE_XNACK_V3`, `..._SRAMECC_V3`): set is on.
const ABI_VERSION_V3: u8 = 1;
const XNACK_V3: u32 = 0x100;
const SRAMECC_V3: u32 = 0x200;
/// The offset of `EI_ABIVERSION` in the ELF identification.
const EI_ABIVERSION: usize = 8;

/// How a target ID or a code object sets one feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Feature {
    /// The processor does not have the feature (or a code object older
    /// than version 4, which does not say).
    #[default]
    Unsupported,
    /// The code object runs with the feature on or off.
    Any,
    /// Off (`feature-`).
    Off,
    /// On (`feature+`).
    On,
}

impl Feature {
    /// The two-bit field of `e_flags` (`mask` selects it): unsupported,
    /// any, off, on, in that order.
    fn from_flags(flags: u32, mask: u32) -> Feature {
        match (flags & mask) >> mask.trailing_zeros() {
            0 => Feature::Unsupported,
            1 => Feature::Any,
            2 => Feature::Off,
            _ => Feature::On,
        }
    }

    /// Whether code built with `self` runs where the feature is `agent`.
    fn runs_on(self, agent: Feature) -> bool {
        match self {
            Feature::Unsupported | Feature::Any => true,
            Feature::Off | Feature::On => self == agent,
        }
    }

    fn suffix(self) -> Option<char> {
        match self {
            Feature::Off => Some('-'),
            Feature::On => Some('+'),
            Feature::Unsupported | Feature::Any => None,
        }
    }
}

/// A processor with its feature settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetId {
    /// `gfx90a`, ...
    pub processor: String,
    /// ECC of the SRAM (on by default on data-centre GPUs).
    pub sramecc: Feature,
    /// Replay of faulting memory accesses (needed for unified memory).
    pub xnack: Feature,
}

/// Why a string is not a target ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // the messages say what the fields are
pub enum TargetIdError {
    /// No `gfx...` processor before the first `:`.
    #[error("'{0}' names no AMD GPU processor (gfx...)")]
    NoProcessor(String),
    /// A feature other than `sramecc`/`xnack` with `+`/`-`.
    #[error("'{id}': '{feature}' is not sramecc+, sramecc-, xnack+ or xnack-")]
    UnknownFeature { id: String, feature: String },
    /// A feature named twice.
    #[error("'{id}': {feature} is set twice")]
    Repeated { id: String, feature: &'static str },
}

impl TargetId {
    /// Parses `gfx90a`, `gfx90a:xnack+`, `gfx90a:sramecc+:xnack-`, also
    /// with the HSA runtime's ISA prefix (`amdgcn-amd-amdhsa--gfx90a...`).
    /// A feature not named is [`Feature::Any`].
    pub fn parse(text: &str) -> Result<TargetId, TargetIdError> {
        let id = text
            .strip_prefix(super::TRIPLE)
            .map_or(text, |rest| rest.trim_start_matches('-'));
        let mut parts = id.split(':');
        let processor = parts.next().unwrap_or_default();
        // `gfx90a`, and LLVM's generic targets (`gfx10-3-generic`).
        let plausible = processor.starts_with("gfx")
            && processor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !plausible {
            return Err(TargetIdError::NoProcessor(text.to_string()));
        }
        let mut target = TargetId {
            processor: processor.to_string(),
            sramecc: Feature::Any,
            xnack: Feature::Any,
        };
        let (mut seen_sramecc, mut seen_xnack) = (false, false);
        for feature in parts {
            let unknown = || TargetIdError::UnknownFeature {
                id: text.to_string(),
                feature: feature.to_string(),
            };
            let (name, setting) = match feature.split_at_checked(feature.len().saturating_sub(1)) {
                Some((name, "+")) => (name, Feature::On),
                Some((name, "-")) => (name, Feature::Off),
                _ => return Err(unknown()),
            };
            let (slot, seen, label) = match name {
                "sramecc" => (&mut target.sramecc, &mut seen_sramecc, "sramecc"),
                "xnack" => (&mut target.xnack, &mut seen_xnack, "xnack"),
                _ => return Err(unknown()),
            };
            if std::mem::replace(seen, true) {
                return Err(TargetIdError::Repeated {
                    id: text.to_string(),
                    feature: label,
                });
            }
            *slot = setting;
        }
        Ok(target)
    }

    /// The target ID of a code object: its processor (`e_flags`) and its
    /// feature settings. Version 3 code objects say only "on" (a clear
    /// bit is taken as "any", where the loader would read "off" on
    /// processors with the feature); older ones say nothing.
    /// `None` when the bytes are not a 64-bit AMD GPU ELF file of a known
    /// processor.
    pub fn of_code_object(bytes: &[u8]) -> Option<TargetId> {
        let processor = super::code_object_processor(bytes)?;
        let flags = crate::elf::info(bytes).ok()?.flags;
        let abi = bytes.get(EI_ABIVERSION).copied().unwrap_or(0);
        let feature = |v4_mask, v3_bit| match abi {
            v if v >= ABI_VERSION_V4 => Feature::from_flags(flags, v4_mask),
            ABI_VERSION_V3 if flags & v3_bit != 0 => Feature::On,
            ABI_VERSION_V3 => Feature::Any,
            _ => Feature::Unsupported,
        };
        Some(TargetId {
            processor: processor.to_string(),
            sramecc: feature(SRAMECC_V4, SRAMECC_V3),
            xnack: feature(XNACK_V4, XNACK_V3),
        })
    }

    /// Whether code built for `self` runs on an agent whose ISA is `agent`
    /// (generic code runs on an agent that lists its family's generic ISA,
    /// `gfx11-generic`, beside its own).
    pub fn runs_on(&self, agent: &TargetId) -> bool {
        self.processor == agent.processor
            && self.sramecc.runs_on(agent.sramecc)
            && self.xnack.runs_on(agent.xnack)
    }
}

/// The canonical spelling: the processor, then the features set on or
/// off, in alphabetical order (`gfx90a:sramecc+:xnack-`).
impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, setting) in [("sramecc", self.sramecc), ("xnack", self.xnack)] {
            if let Some(sign) = setting.suffix() {
                write!(f, ":{name}{sign}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TargetId {
        TargetId::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_canonically() {
        let t = id("amdgcn-amd-amdhsa--gfx90a:xnack-:sramecc+");
        assert_eq!(t.processor, "gfx90a");
        assert_eq!((t.sramecc, t.xnack), (Feature::On, Feature::Off));
        assert_eq!(t.to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(id("gfx942").to_string(), "gfx942");
        assert_eq!(id("gfx942").xnack, Feature::Any);
        assert_eq!(id("gfx10-3-generic").processor, "gfx10-3-generic");
    }

    #[test]
    fn refuses_malformed_ids() {
        for bad in [
            "",
            ":xnack+",
            "gfx90a:xnack",
            "gfx90a:foo+",
            "gfx90a:xnack+:xnack-",
            "gfx90a:+",
        ] {
            assert!(TargetId::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn feature_rules_follow_the_loader() {
        let agent = id("gfx90a:sramecc+:xnack-");
        assert!(id("gfx90a").runs_on(&agent));
        assert!(id("gfx90a:xnack-").runs_on(&agent));
        assert!(id("gfx90a:sramecc+:xnack-").runs_on(&agent));
        assert!(!id("gfx90a:xnack+").runs_on(&agent));
        assert!(!id("gfx90a:sramecc-").runs_on(&agent));
        assert!(!id("gfx942").runs_on(&agent));
        // An agent without the feature runs no code that asks for it.
        let rdna = TargetId {
            processor: "gfx1030".into(),
            sramecc: Feature::Unsupported,
            xnack: Feature::Unsupported,
        };
        assert!(id("gfx1030").runs_on(&rdna));
        assert!(!id("gfx1030:xnack+").runs_on(&rdna));
        // Generic code runs on the generic ISA an agent lists, with the
        // feature rule; not on the agent's own ISA, nor another family's.
        let generic_isa = id("gfx9-4-generic:sramecc+:xnack-");
        assert!(id("gfx9-4-generic").runs_on(&generic_isa));
        assert!(id("gfx9-4-generic:xnack-").runs_on(&generic_isa));
        assert!(!id("gfx9-4-generic:sramecc-").runs_on(&generic_isa));
        assert!(!id("gfx9-4-generic").runs_on(&id("gfx942:sramecc+:xnack-")));
        assert!(!id("gfx942").runs_on(&generic_isa));
        assert!(!id("gfx11-generic").runs_on(&id("gfx10-3-generic")));
    }

    #[test]
    fn reads_e_flags_of_version_4_and_later() {
        assert_eq!(Feature::from_flags(0x53f, XNACK_V4), Feature::Any);
        assert_eq!(Feature::from_flags(0x53f, SRAMECC_V4), Feature::Any);
        assert_eq!(Feature::from_flags(0xf3f, XNACK_V4), Feature::On);
        assert_eq!(Feature::from_flags(0xb3f, SRAMECC_V4), Feature::Off);
        assert_eq!(Feature::from_flags(0x03f, XNACK_V4), Feature::Unsupported);
    }
}
