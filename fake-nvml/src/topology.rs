//! The simulated node's PCIe and NUMA layout, and where its NVLinks lead.
//!
//! Real nodes get these from the board; a scenario does not describe them, so the
//! simulator lays every node out as a two-socket HGX-style board, the layout NVIDIA's
//! device plugin meets on most multi-GPU nodes:
//! - the first half of the GPUs (by index, rounded up) hang off NUMA node 0, the rest
//!   off NUMA node 1 (`/sys/bus/pci/devices/<bus id>/numa_node`, written by
//!   [`crate::host`]);
//! - GPUs `2k` and `2k+1` share a PCIe switch.
//!
//! [`common_ancestor`] answers `nvmlDeviceGetTopologyCommonAncestor` from that layout
//! (levels as `nvml.h`'s `nvmlGpuTopologyLevel_t` numbers them), and it agrees with the
//! NUMA nodes: two GPUs on different nodes meet only at the system level. The device
//! plugin's preferred allocation (go-gpuallocator, `internal/links/device.go`) turns
//! these levels into its P2P link types.
//!
//! NVLink: every link of an NVLink board leads to an NVSwitch, as on HGX baseboards, so
//! `nvmlDeviceGetNvLinkRemotePciInfo_v2` names a switch ([`nvswitch_of_link`]), never
//! a peer GPU; go-gpuallocator then sees no direct GPU-to-GPU NVLink, exactly as on a
//! real HGX node (its NVSwitch handling is a TODO in `GetNVLink`).

/// `nvmlGpuTopologyLevel_t` (`nvml.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum TopologyLevel {
    /// `NVML_TOPOLOGY_INTERNAL`: the same board (or the same GPU).
    Internal = 0,
    /// `NVML_TOPOLOGY_SINGLE`: through a single PCIe switch.
    Single = 10,
    /// `NVML_TOPOLOGY_MULTIPLE`: through several PCIe switches, no host bridge.
    Multiple = 20,
    /// `NVML_TOPOLOGY_HOSTBRIDGE`: through one host bridge.
    HostBridge = 30,
    /// `NVML_TOPOLOGY_NODE`: within one NUMA node.
    Node = 40,
    /// `NVML_TOPOLOGY_SYSTEM`: across NUMA nodes.
    System = 50,
}

/// The NUMA node of GPU `index` on a node with `gpus` GPUs.
pub fn numa_node(index: u32, gpus: u32) -> u32 {
    u32::from(index >= gpus.div_ceil(2))
}

/// The deepest PCIe ancestor GPUs `a` and `b` share, on a node with `gpus` GPUs.
pub fn common_ancestor(a: u32, b: u32, gpus: u32) -> TopologyLevel {
    if a == b {
        TopologyLevel::Internal
    } else if numa_node(a, gpus) != numa_node(b, gpus) {
        TopologyLevel::System
    } else if a / 2 == b / 2 {
        TopologyLevel::Single
    } else {
        TopologyLevel::Node
    }
}

/// NVSwitches on the baseboard of a GPU with `links` NVLinks: four on an 18-link
/// (NVLink 4, Hopper) board, six on the others (NVLink 3, HGX A100).
pub fn nvswitch_count(links: u32) -> u32 {
    if links >= 18 { 4 } else { 6 }
}

/// The NVSwitch link `link` of a GPU with `links` links leads to: links are spread over
/// the switches in turn.
pub fn nvswitch_of_link(link: u32, links: u32) -> u32 {
    link % nvswitch_count(links)
}

/// PCI bus of NVSwitch `switch`. Domain 1 keeps the switches apart from any GPU bus a
/// scenario can give (GPUs default to domain 0).
pub const NVSWITCH_DOMAIN: u32 = 1;

/// PCI bus number of NVSwitch `switch`.
pub fn nvswitch_bus(switch: u32) -> u32 {
    0x10 + switch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eight_gpu_node_is_two_sockets_of_switch_pairs() {
        let numa: Vec<u32> = (0..8).map(|i| numa_node(i, 8)).collect();
        assert_eq!(numa, [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(common_ancestor(0, 1, 8), TopologyLevel::Single);
        assert_eq!(common_ancestor(0, 3, 8), TopologyLevel::Node);
        assert_eq!(common_ancestor(3, 4, 8), TopologyLevel::System);
        assert_eq!(common_ancestor(5, 5, 8), TopologyLevel::Internal);
        for a in 0..8 {
            for b in 0..8 {
                assert_eq!(common_ancestor(a, b, 8), common_ancestor(b, a, 8), "symmetric");
            }
        }
    }

    #[test]
    fn small_nodes_stay_on_one_socket_where_they_can() {
        assert_eq!(numa_node(0, 1), 0);
        assert_eq!([numa_node(0, 3), numa_node(1, 3), numa_node(2, 3)], [0, 0, 1]);
        assert_eq!(common_ancestor(0, 1, 2), TopologyLevel::System, "one GPU per socket");
    }

    #[test]
    fn links_spread_over_the_switches() {
        let hopper: Vec<u32> = (0..18).map(|l| nvswitch_of_link(l, 18)).collect();
        assert_eq!(hopper.iter().filter(|s| **s == 0).count(), 5);
        assert!(hopper.iter().all(|s| *s < 4));
        assert!((0..12).map(|l| nvswitch_of_link(l, 12)).all(|s| s < 6));
    }
}
