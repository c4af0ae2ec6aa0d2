//! Each rental's share of its host's CPU, memory and processes, by the GPUs it holds: a whole
//! GPU's share is the host's divided by its GPUs, and a MIG slice holds its compute slices'
//! sevenths of that, so the slices of one GPU together never get more than the GPU would.
//! Both runtimes (the bubblewrap sandbox and containers) limit rentals by it.

/// Processes (and threads) one rental may have per GPU.
pub const PIDS_PER_GPU: u64 = 4096;

/// The host's resources to share among rentals, by GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostShares {
    pub cpu_millicores: u64,
    pub ram_bytes: u64,
    pub gpus: u64,
    /// Processes per GPU; [`HostShares::new`] gives 4096.
    pub pids_per_gpu: u64,
}

impl HostShares {
    pub fn new(cpu_millicores: u64, ram_bytes: u64, gpus: u64) -> HostShares {
        HostShares { cpu_millicores, ram_bytes, gpus, pids_per_gpu: PIDS_PER_GPU }
    }

    /// `(cpu millicores, memory bytes, processes)` for a rental of `gpus` GPUs.
    pub fn for_gpus(&self, gpus: usize) -> (u64, u64, u64) {
        self.for_sevenths(gpus as u64 * 7)
    }

    /// The same for a share of GPUs in sevenths of a GPU (a MIG slice holds its compute
    /// slices' sevenths), so slices of one GPU share that GPU's part of the host.
    pub fn for_sevenths(&self, sevenths: u64) -> (u64, u64, u64) {
        let sevenths = sevenths.max(1);
        let per = |total: u64| total / self.gpus.max(1) * sevenths / 7;
        (per(self.cpu_millicores).max(100), per(self.ram_bytes), (self.pids_per_gpu * sevenths / 7).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_their_gpus_part_of_the_host() {
        let shares = HostShares::new(56_000, 56 << 30, 8);
        assert_eq!(shares.for_gpus(2), shares.for_sevenths(14));
        assert_eq!(shares.for_gpus(1), (7_000, 7 << 30, PIDS_PER_GPU));
        // A 3g slice: three sevenths of one GPU's part.
        assert_eq!(shares.for_sevenths(3), (3_000, 3 << 30, PIDS_PER_GPU * 3 / 7));
    }
}
