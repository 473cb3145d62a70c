//! MPI as a transport for the remote protocol's messages: libmpi loaded at
//! run time ([`ffi`]) and the framing of requests, replies and raw bulk data
//! ([`transport`]). Shared by the MPI plugin (`plugins/mpi`, the
//! application's side) and `offload serve --mpi` (the serving ranks), so
//! that the server does not depend on the plugin.

pub mod ffi;
pub mod transport;

pub use transport::{launched_with_ranks, Op, Role, Transport};

/// Set by `offload serve --mpi` in its own environment: runtimes that
/// images load into a serving rank never start a client transport there.
pub const SERVING_ENV: &str = "OFFLOAD_MPI_SERVING";

#[cfg(test)]
mod tests {
    use super::*;

    /// An environment of `pairs`, for the launcher checks.
    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn launcher_environment() {
        assert!(!launched_with_ranks(env(&[])));
        // `mpirun -np 4 ./app`: an ordinary MPI job, left alone.
        assert!(!launched_with_ranks(env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_NUM_APP_CTX", "1")
        ])));
        // `mpirun -np 1 ./app : -np 2 offload serve --mpi`.
        assert!(launched_with_ranks(env(&[
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("OMPI_NUM_APP_CTX", "2")
        ])));
        // Launchers that do not tell: only OFFLOAD_PLUGINS=mpi.
        assert!(!launched_with_ranks(env(&[("PMI_SIZE", "2")])));
        assert!(!launched_with_ranks(env(&[("OMPI_NUM_APP_CTX", "x")])));
    }

    #[test]
    fn the_launcher_picks_the_library_tried_first() {
        assert_eq!(ffi::candidates(env(&[]))[0], "libmpi.so.40");
        assert_eq!(
            ffi::candidates(env(&[("OMPI_COMM_WORLD_SIZE", "3"), ("PMI_RANK", "0")]))[0],
            "libmpi.so.40"
        );
        // MPICH's hydra (or srun with PMI): MPICH's sonames first.
        let hydra = ffi::candidates(env(&[("PMI_RANK", "0"), ("PMI_SIZE", "3")]));
        assert_eq!(
            hydra,
            [
                "libmpich.so.12",
                "libmpi.so.12",
                "libmpi.so.40",
                "libmpi.so"
            ]
        );
    }

    #[test]
    fn ops_round_trip() {
        for b in 0..=255u8 {
            if let Some(op) = Op::from_u8(b) {
                assert_eq!(op as u8, b);
            }
        }
        assert_eq!(Op::from_u8(16), Some(Op::Ping));
    }
}
