//! Choosing specific GPUs among the free ones: NVLink-connected sets first, else the lowest
//! device indexes. Pure, so property-tested; the database still refuses any overlap on its own.
//!
//! A unit (whole GPU or MIG slice) is blocked by any active hold on its physical GPU that
//! covers one of its slots ([`blockers`]): a slice by a whole-GPU hold and the reverse, as the
//! database's no-overlap rule has it.

use crate::{
    AppResult,
    db::DbResultExt,
    entities::{gpus, rental_gpus},
};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use std::collections::{HashMap, HashSet};

/// The physical GPU a unit is on: itself, or a slice's parent.
pub(crate) fn physical_gpu(unit: &gpus::Model) -> i64 {
    unit.parent_id.unwrap_or(unit.id)
}

/// For each of `units`, the rentals whose active holds on its physical GPU cover one of its
/// slots at some time in `[start, end)`.
pub(crate) async fn blockers(
    conn: &impl ConnectionTrait,
    units: &[gpus::Model],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> AppResult<HashMap<i64, HashSet<i64>>> {
    let physical: HashSet<i64> = units.iter().map(physical_gpu).collect();
    let holds = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::PhysicalGpuId.is_in(physical))
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::EndsAt.gt(start))
        .filter(rental_gpus::Column::StartsAt.lt(end))
        .all(conn)
        .await
        .context("loading holds")?;
    let mut blockers: HashMap<i64, HashSet<i64>> = HashMap::new();
    for hold in &holds {
        let covered = units.iter().filter(|u| {
            physical_gpu(u) == hold.physical_gpu_id && hold.slot_from < u.slot_to && u.slot_from < hold.slot_to
        });
        for unit in covered {
            blockers.entry(unit.id).or_default().insert(hold.rental_id);
        }
    }
    Ok(blockers)
}

/// A GPU the allocator may choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeGpu {
    pub id: i64,
    pub uuid: String,
    pub index: u32,
    /// UUIDs of the GPUs it has NVLink to.
    pub peers: Vec<String>,
}

/// Picks `n` of `free` (sorted by device index): a set whose GPUs are all NVLink-connected to
/// each other when one exists among the greedy candidates, else the lowest indexes.
pub fn choose_gpus(free: &[FreeGpu], n: usize) -> Option<Vec<i64>> {
    if n == 0 || free.len() < n {
        return None;
    }
    let linked = |a: &FreeGpu, b: &FreeGpu| a.peers.contains(&b.uuid) && b.peers.contains(&a.uuid);
    if n > 1 {
        for start in free {
            let mut clique: Vec<&FreeGpu> = vec![start];
            for candidate in free {
                if clique.len() == n {
                    break;
                }
                if candidate.id != start.id && clique.iter().all(|c| linked(c, candidate)) {
                    clique.push(candidate);
                }
            }
            if clique.len() == n {
                let mut ids: Vec<i64> = clique.iter().map(|g| g.id).collect();
                ids.sort_unstable();
                return Some(ids);
            }
        }
    }
    Some(free.iter().take(n).map(|g| g.id).collect())
}

impl From<&gpus::Model> for FreeGpu {
    fn from(gpu: &gpus::Model) -> Self {
        FreeGpu {
            id: gpu.id,
            uuid: gpu.uuid.clone(),
            index: u32::try_from(gpu.device_index).unwrap_or(0),
            peers: serde_json::from_str(&gpu.nvlink_peers).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// `islands` groups of GPUs, each group fully NVLinked inside; `taken` marks busy ones.
    fn topology(islands: &[usize], taken: &[bool]) -> Vec<FreeGpu> {
        let mut all = Vec::new();
        let mut index = 0u32;
        for (island, &size) in islands.iter().enumerate() {
            let uuids: Vec<String> = (0..size).map(|i| format!("GPU-{island}-{i}")).collect();
            for uuid in &uuids {
                all.push(FreeGpu {
                    id: i64::from(index) + 1,
                    uuid: uuid.clone(),
                    index,
                    peers: uuids.iter().filter(|u| *u != uuid).cloned().collect(),
                });
                index += 1;
            }
        }
        all.into_iter().enumerate().filter(|(i, _)| !taken.get(*i).copied().unwrap_or(false)).map(|(_, g)| g).collect()
    }

    proptest! {
        #[test]
        fn allocator_picks_distinct_free_gpus_and_prefers_one_island(
            islands in proptest::collection::vec(1usize..5, 1..4),
            taken in proptest::collection::vec(any::<bool>(), 16),
            n in 1usize..9,
        ) {
            let free = topology(&islands, &taken);
            match choose_gpus(&free, n) {
                None => prop_assert!(free.len() < n),
                Some(ids) => {
                    prop_assert_eq!(ids.len(), n);
                    let distinct: HashSet<_> = ids.iter().collect();
                    prop_assert_eq!(distinct.len(), n);
                    prop_assert!(ids.iter().all(|id| free.iter().any(|g| g.id == *id)));
                    // If some island has n free GPUs, the choice lies within one island.
                    let island_of = |id: i64| free.iter().find(|g| g.id == id).map(|g| g.uuid.split('-').nth(1).unwrap_or("").to_owned());
                    let mut free_per_island = std::collections::HashMap::new();
                    for g in &free {
                        *free_per_island.entry(g.uuid.split('-').nth(1).unwrap_or("").to_owned()).or_insert(0usize) += 1;
                    }
                    if n > 1 && free_per_island.values().any(|&c| c >= n) {
                        let first = island_of(ids[0]);
                        prop_assert!(ids.iter().all(|id| island_of(*id) == first), "{ids:?} spans islands");
                    }
                }
            }
        }
    }
}
