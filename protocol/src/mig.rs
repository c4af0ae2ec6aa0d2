//! MIG layouts: the profiles a GPU can be carved into (with NVIDIA's tables of the models the
//! simulator plays) and the rule a layout must keep to fit one GPU. The server checks a provider's layout with it before sending
//! [`crate::ServerMessage::ApplyMigLayout`]; the simulated GPU source applies the same rule, so
//! what one side accepts the other does.
//!
//! The rule is NVIDIA's budget in its simplest form: at most seven compute slices, eight memory
//! slices and seven instances per GPU, and no more instances of a profile than the GPU holds.
//! NVIDIA's placement rules are stricter for a few mixes; a real GPU that refuses one answers
//! through NVML and the agent reports it ([`crate::AgentMessage::MigLayoutFailed`]).

use serde::{Deserialize, Serialize};

/// Compute slices of a MIG-capable GPU.
pub const COMPUTE_SLICES: u32 = 7;
/// Memory slices of a MIG-capable GPU.
pub const MEMORY_SLICES: u32 = 8;

/// A MIG profile a GPU can make, with what one instance of it takes of the GPU.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfile {
    /// NVIDIA's name, e.g. `1g.10gb`.
    pub name: String,
    /// Compute slices out of the GPU's seven.
    pub compute_slices: u32,
    /// Memory slices out of the GPU's eight.
    pub memory_slices: u32,
    pub memory_bytes: u64,
    /// The most instances of this profile one GPU holds.
    pub max_instances: u32,
}

/// A model's profiles: (name, compute slices, memory slices, most instances). From NVIDIA's MIG
/// user guide.
type Profiles = &'static [(&'static str, u32, u32, u32)];

const A100_40GB: Profiles = &[
    ("1g.5gb", 1, 1, 7),
    ("1g.10gb", 1, 2, 4),
    ("2g.10gb", 2, 2, 3),
    ("3g.20gb", 3, 4, 2),
    ("4g.20gb", 4, 4, 1),
    ("7g.40gb", 7, 8, 1),
];
const GPU_80GB: Profiles = &[
    ("1g.10gb", 1, 1, 7),
    ("1g.20gb", 1, 2, 4),
    ("2g.20gb", 2, 2, 3),
    ("3g.40gb", 3, 4, 2),
    ("4g.40gb", 4, 4, 1),
    ("7g.80gb", 7, 8, 1),
];
const H200_141GB: Profiles = &[
    ("1g.18gb", 1, 1, 7),
    ("1g.35gb", 1, 2, 4),
    ("2g.35gb", 2, 2, 3),
    ("3g.71gb", 3, 4, 2),
    ("4g.71gb", 4, 4, 1),
    ("7g.141gb", 7, 8, 1),
];

/// NVIDIA's MIG profiles of a model named as the simulator names it (`H100-80GB`,
/// `A100-40GB`, `H200-141GB`) with `memory_total_bytes`, or `None` for a model without MIG: what
/// the simulator plays and tests use. Real agents read their GPU's profiles from NVML.
pub fn nvidia_profiles(model: &str, memory_total_bytes: u64) -> Option<Vec<MigProfile>> {
    let table = match model.to_ascii_uppercase().as_str() {
        "H200-141GB" => H200_141GB,
        "H100-80GB" | "A100-80GB" => GPU_80GB,
        "A100-40GB" => A100_40GB,
        _ => return None,
    };
    Some(
        table
            .iter()
            .map(|&(name, compute_slices, memory_slices, max_instances)| MigProfile {
                name: name.to_owned(),
                compute_slices,
                memory_slices,
                memory_bytes: memory_total_bytes / u64::from(MEMORY_SLICES) * u64::from(memory_slices),
                max_instances,
            })
            .collect(),
    )
}

/// The profiles of `wanted`, in its order, when they are all among `profiles` and fit one GPU
/// together; otherwise why not, in words a provider can act on.
pub fn check_layout<'a>(profiles: &'a [MigProfile], wanted: &[String]) -> Result<Vec<&'a MigProfile>, String> {
    if wanted.is_empty() {
        return Err("a MIG layout has at least one instance".into());
    }
    let instances = COMPUTE_SLICES as usize;
    if wanted.len() > instances {
        return Err(format!("a GPU holds at most {instances} MIG instances; {} were asked", wanted.len()));
    }
    let names = || profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ");
    let mut chosen = Vec::with_capacity(wanted.len());
    for name in wanted {
        let profile = profiles
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| format!("{name:?} is not a MIG profile of this GPU; its profiles: {}", names()))?;
        chosen.push(profile);
    }
    for profile in profiles {
        let count = chosen.iter().filter(|p| p.name == profile.name).count();
        if count > profile.max_instances as usize {
            return Err(format!(
                "a GPU holds at most {} instances of {}; {count} were asked",
                profile.max_instances, profile.name
            ));
        }
    }
    let compute: u32 = chosen.iter().map(|p| p.compute_slices).sum();
    let memory: u32 = chosen.iter().map(|p| p.memory_slices).sum();
    if compute > COMPUTE_SLICES || memory > MEMORY_SLICES {
        return Err(format!(
            "this layout needs {compute} compute slices and {memory} memory slices; \
             a GPU has {COMPUTE_SLICES} and {MEMORY_SLICES}"
        ));
    }
    Ok(chosen)
}

/// Parses a layout as people write it (`3g.40gb*2+1g.10gb`: `PROFILE[*COUNT]` joined by `+`)
/// into one profile name per instance.
pub fn parse_layout(layout: &str) -> Result<Vec<String>, String> {
    // `+` also joins a profile's extras (`1g.10gb+me`): a part that does not start with a digit
    // belongs to the profile before it.
    let mut parts: Vec<String> = Vec::new();
    for part in layout.split('+').map(str::trim) {
        match parts.last_mut() {
            Some(last) if !part.starts_with(|c: char| c.is_ascii_digit()) && !part.is_empty() => {
                match last.split_once('*') {
                    // `1g.10gb*2+me` is not a profile with extras.
                    Some(_) => return Err(format!("{part:?} does not name a MIG profile")),
                    None => last.push_str(&format!("+{part}")),
                }
            }
            _ => parts.push(part.to_owned()),
        }
    }
    let mut names = Vec::new();
    for part in &parts {
        let (name, count) = match part.split_once('*') {
            Some((name, count)) => {
                (name.trim(), count.trim().parse::<u32>().map_err(|_| format!("{part:?}: {count:?} is not a count"))?)
            }
            None => (part.as_str(), 1),
        };
        if name.is_empty() {
            return Err("a MIG layout names its profiles, e.g. 3g.40gb*2+1g.10gb; this one is empty".into());
        }
        if count == 0 || count > COMPUTE_SLICES {
            return Err(format!("{part:?}: a GPU holds 1 to {COMPUTE_SLICES} instances of a profile"));
        }
        names.extend((0..count).map(|_| name.to_owned()));
        if names.len() > COMPUTE_SLICES as usize {
            return Err(format!("a GPU holds at most {COMPUTE_SLICES} MIG instances"));
        }
    }
    Ok(names)
}

/// Writes a layout as [`parse_layout`] reads it, same profiles grouped in first-seen order
/// (`["3g.40gb", "1g.10gb", "3g.40gb"]` → `3g.40gb*2+1g.10gb`).
pub fn write_layout<S: AsRef<str>>(names: &[S]) -> String {
    let mut groups: Vec<(&str, usize)> = Vec::new();
    for name in names.iter().map(AsRef::as_ref) {
        match groups.iter_mut().find(|(seen, _)| *seen == name) {
            Some((_, count)) => *count += 1,
            None => groups.push((name, 1)),
        }
    }
    groups
        .iter()
        .map(|(name, count)| if *count == 1 { (*name).to_owned() } else { format!("{name}*{count}") })
        .collect::<Vec<_>>()
        .join("+")
}

/// Whether two layouts hold the same instances, whatever their order (the driver places
/// instances where they fit, so a GPU reports them in its own order).
pub fn same_layout<A: AsRef<str>, B: AsRef<str>>(a: &[A], b: &[B]) -> bool {
    let sorted = |names: Vec<String>| {
        let mut names = names;
        names.sort_unstable();
        names
    };
    sorted(a.iter().map(|n| n.as_ref().to_ascii_lowercase()).collect())
        == sorted(b.iter().map(|n| n.as_ref().to_ascii_lowercase()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Vec<MigProfile> {
        nvidia_profiles("H100-80GB", 80 << 30).unwrap()
    }

    fn names(layout: &[&str]) -> Vec<String> {
        layout.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn layouts_that_fit_resolve_and_others_say_why() {
        let profiles = h100();
        let two = check_layout(&profiles, &names(&["3g.40gb", "3g.40gb"])).unwrap();
        assert_eq!(two.iter().map(|p| p.compute_slices).sum::<u32>(), 6);
        assert_eq!(check_layout(&profiles, &names(&["1G.10GB"; 7])).unwrap().len(), 7);
        assert!(check_layout(&profiles, &[]).unwrap_err().contains("at least one"));
        assert!(check_layout(&profiles, &names(&["1g.10gb"; 8])).unwrap_err().contains("at most 7 MIG instances"));
        let full = check_layout(&profiles, &names(&["7g.80gb", "1g.10gb"])).unwrap_err();
        assert!(full.contains("8 compute slices") && full.contains("has 7"), "{full}");
        assert!(
            check_layout(&profiles, &names(&["3g.40gb"; 3])).unwrap_err().contains("at most 2 instances of 3g.40gb")
        );
        assert!(
            check_layout(&profiles, &names(&["4g.40gb", "3g.40gb", "1g.10gb"]))
                .unwrap_err()
                .contains("9 memory slices")
        );
        assert!(check_layout(&profiles, &names(&["5g.50gb"])).unwrap_err().contains("its profiles: 1g.10gb"));
        assert!(check_layout(&[], &names(&["1g.10gb"])).is_err());
    }

    #[test]
    fn layouts_are_written_and_read_back() {
        assert_eq!(parse_layout("4g.20gb+2g.10gb*2 + 1g.5gb").unwrap(), ["4g.20gb", "2g.10gb", "2g.10gb", "1g.5gb"]);
        assert!(parse_layout("1g.10gb*x").unwrap_err().contains("not a count"));
        assert!(parse_layout("1g.10gb*0").is_err());
        assert!(parse_layout("1g.10gb*8").is_err());
        assert!(parse_layout("").unwrap_err().contains("empty"));
        assert!(parse_layout("1g.10gb*4+1g.10gb*4").unwrap_err().contains("at most 7"));
        assert_eq!(parse_layout("1g.10gb+me*2+3g.40gb").unwrap(), ["1g.10gb+me", "1g.10gb+me", "3g.40gb"]);
        assert_eq!(write_layout(&["1g.10gb+me", "1g.10gb+me"]), "1g.10gb+me*2");
        assert_eq!(write_layout(&["3g.40gb", "1g.10gb", "3g.40gb"]), "3g.40gb*2+1g.10gb");
        let names = parse_layout("3g.40gb*2+1g.10gb").unwrap();
        assert_eq!(parse_layout(&write_layout(&names)).unwrap(), names);
    }

    #[test]
    fn models_with_mig_have_their_profiles() {
        let a100 = nvidia_profiles("a100-40gb", 40 << 30).unwrap();
        assert_eq!(a100[0].name, "1g.5gb");
        assert_eq!(a100[0].memory_bytes, 5 << 30);
        assert_eq!(nvidia_profiles("H200-141GB", 141 << 30).unwrap().last().unwrap().name, "7g.141gb");
        assert!(nvidia_profiles("L40S-48GB", 48 << 30).is_none());
    }

    #[test]
    fn layouts_compare_as_multisets() {
        assert!(same_layout(&["3g.40gb", "1g.10gb"], &["1g.10gb".to_owned(), "3G.40GB".to_owned()]));
        assert!(!same_layout(&["3g.40gb", "1g.10gb"], &["3g.40gb"]));
        assert!(!same_layout(&["1g.10gb", "1g.10gb"], &["1g.10gb", "1g.20gb"]));
    }
}
