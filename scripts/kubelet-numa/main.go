// kubelet-numa: the 1.36 kubelet's own NUMA-alignment code on hand-made cases, for gputopo's
// tests (tests/topology/test_numa_alignment_kubelet.py). Built by
// `scripts/build-k8s-tools.sh --kubelet-numa` against k8s.io/kubernetes@v1.36.3; the device
// manager is compiled from a verbatim copy of its package plus devicemanager/zz_gputopo_export.go
// (see there why).
//
// Reads one JSON case per line on stdin, writes one JSON answer per line on stdout:
//
//	device manager  GetTopologyHints / GetPodTopologyHints      (devicemanager/topology_hints.go)
//	CPU manager     staticPolicy.GetTopologyHints / GetPodTopologyHints (cpumanager/policy_static.go)
//	merge           Policy.Merge of none / best-effort / restricted / single-numa-node
//	                (topologymanager/policy*.go)
//	allocation      devicesToAllocate with the merged hint, against a plugin that proposes the
//	                pod's GPUs the way gputopo's plugin does (devicemanager/manager.go)
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/cpuset"

	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"gputopo.local/kubeletnuma/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
)

type cpuNode struct {
	NUMA  int `json:"numa"`
	Count int `json:"count"`
	Free  int `json:"free"`
}

type device struct {
	ID        string `json:"id"`
	NUMA      int    `json:"numa"`
	Healthy   bool   `json:"healthy"`
	Allocated bool   `json:"allocated"`
}

type plugin struct {
	Kind string   `json:"kind"` // "gpu": propose exactly Want; "unit": units on GPU Want[0]
	Want []string `json:"want"`
}

type kase struct {
	ID            int                 `json:"id"`
	Policy        string              `json:"policy"`
	Scope         string              `json:"scope"`
	PreferClosest bool                `json:"prefer_closest"`
	Distances     map[int][]uint64    `json:"distances"`
	CPUManager    string              `json:"cpu_manager"`
	CPUs          []cpuNode           `json:"cpus"`
	Pod           v1.Pod              `json:"pod"`
	Devices       map[string][]device `json:"devices"`
	Plugin        map[string]plugin   `json:"plugin"`
}

type hint struct {
	Nodes     []int `json:"nodes"` // null = nil affinity
	Preferred bool  `json:"preferred"`
}

type answer struct {
	ID          int                `json:"id"`
	DeviceHints map[string]*[]hint `json:"device_hints"`
	CPUHints    *[]hint            `json:"cpu_hints"`
	Hint        hint               `json:"hint"`
	Admit       bool               `json:"admit"`
	Allocated   map[string][]string `json:"allocated"`
	Errors      map[string]string   `json:"errors"`
	Error       string              `json:"error,omitempty"`
}

type store struct{ policy topologymanager.Policy }

func (s *store) GetAffinity(string, string) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{}
}
func (s *store) GetPolicy() topologymanager.Policy { return s.policy }
func (s *store) Name() string                      { return "gputopo-harness" }

func toHint(h topologymanager.TopologyHint) hint {
	if h.NUMANodeAffinity == nil {
		return hint{nil, h.Preferred}
	}
	return hint{h.NUMANodeAffinity.GetBits(), h.Preferred}
}

func toHints(hs []topologymanager.TopologyHint) *[]hint {
	if hs == nil {
		return nil
	}
	out := make([]hint, 0, len(hs))
	for _, h := range hs {
		out = append(out, toHint(h))
	}
	return &out
}

func newPolicy(name string, numa *topologymanager.NUMAInfo, opts topologymanager.PolicyOptions) (topologymanager.Policy, error) {
	switch name {
	case topologymanager.PolicyNone:
		return topologymanager.NewNonePolicy(), nil
	case topologymanager.PolicyBestEffort:
		return topologymanager.NewBestEffortPolicy(numa, opts), nil
	case topologymanager.PolicyRestricted:
		return topologymanager.NewRestrictedPolicy(numa, opts), nil
	case topologymanager.PolicySingleNumaNode:
		return topologymanager.NewSingleNumaNodePolicy(numa, opts), nil
	}
	return nil, fmt.Errorf("unknown policy %q", name)
}

// propose is gputopo's GetPreferredAllocation (device_plugin/identity.py propose).
func propose(p plugin) devicemanager.GputopoPreferred {
	return func(available, mustInclude []string, size int) ([]string, error) {
		offered := map[string]bool{}
		for _, d := range append(append([]string{}, available...), mustInclude...) {
			offered[d] = true
		}
		must := map[string]bool{}
		for _, d := range mustInclude {
			must[d] = true
		}
		chosen := append([]string{}, mustInclude...)
		if p.Kind == "gpu" {
			wanted := map[string]bool{}
			for _, d := range p.Want {
				wanted[d] = true
			}
			for _, d := range mustInclude {
				if !wanted[d] {
					return nil, fmt.Errorf("the kubelet insists on %s", d)
				}
			}
			for _, d := range p.Want {
				if offered[d] && !must[d] {
					chosen = append(chosen, d)
				}
			}
		} else {
			gpu := p.Want[0] + "::"
			for _, d := range mustInclude {
				if !strings.HasPrefix(d, gpu) {
					return nil, fmt.Errorf("the kubelet insists on %s", d)
				}
			}
			var on []string
			for d := range offered {
				if strings.HasPrefix(d, gpu) && !must[d] {
					on = append(on, d)
				}
			}
			sort.Strings(on)
			chosen = append(chosen, on...)
		}
		if len(chosen) < size {
			return nil, fmt.Errorf("the kubelet offers only %d of %d", len(chosen), size)
		}
		return chosen[:size], nil
	}
}

func solve(c kase) answer {
	logger := klog.Background()
	ans := answer{ID: c.ID, DeviceHints: map[string]*[]hint{}, Allocated: map[string][]string{}, Errors: map[string]string{}}
	var nodes []int
	details := topology.CPUDetails{}
	free := []int{}
	cpu := 0
	for _, n := range c.CPUs {
		nodes = append(nodes, n.NUMA)
		for i := 0; i < n.Count; i++ {
			details[cpu] = topology.CPUInfo{NUMANodeID: n.NUMA, SocketID: n.NUMA, CoreID: cpu}
			if i < n.Free {
				free = append(free, cpu)
			}
			cpu++
		}
	}
	topo := &topology.CPUTopology{NumCPUs: cpu, NumCores: cpu, NumSockets: len(c.CPUs), NumNUMANodes: len(c.CPUs), CPUDetails: details}
	numa := &topologymanager.NUMAInfo{Nodes: nodes, NUMADistances: topologymanager.NUMADistances(c.Distances)}
	policy, err := newPolicy(c.Policy, numa, topologymanager.PolicyOptions{PreferClosestNUMA: c.PreferClosest})
	if err != nil {
		ans.Error = err.Error()
		return ans
	}
	podScope := c.Scope == "pod"

	devices := map[string][]devicemanager.GputopoDevice{}
	preferred := map[string]devicemanager.GputopoPreferred{}
	for res, ds := range c.Devices {
		for _, d := range ds {
			devices[res] = append(devices[res], devicemanager.GputopoDevice{ID: d.ID, NUMA: d.NUMA, Healthy: d.Healthy, Allocated: d.Allocated})
		}
		preferred[res] = propose(c.Plugin[res])
	}
	dm := devicemanager.NewGputopoManager(nodes, devices, preferred)

	// The container that asks for devices (the cases have one).
	var container *v1.Container
	all := append(append([]v1.Container{}, c.Pod.Spec.InitContainers...), c.Pod.Spec.Containers...)
	for i := range all {
		for name := range all[i].Resources.Limits {
			if _, ok := c.Devices[string(name)]; ok && container == nil {
				container = &all[i]
			}
		}
	}
	if container == nil {
		ans.Error = "no container asks for a device"
		return ans
	}
	devHints := dm.TopologyHints(&c.Pod, container, podScope)
	for res, hs := range devHints {
		ans.DeviceHints[res] = toHints(hs)
	}
	providers := []map[string][]topologymanager.TopologyHint{devHints}
	if c.CPUManager == "static" {
		st := state.NewMemoryState(logger)
		st.SetDefaultCPUSet(cpuset.New(free...))
		cp, err := cpumanager.NewStaticPolicy(logger, topo, 0, cpuset.New(), &store{policy}, nil)
		if err != nil {
			ans.Error = err.Error()
			return ans
		}
		var ch map[string][]topologymanager.TopologyHint
		if podScope {
			ch = cp.GetPodTopologyHints(logger, st, &c.Pod)
		} else {
			ch = cp.GetTopologyHints(logger, st, &c.Pod, container)
		}
		if ch != nil {
			ans.CPUHints = toHints(ch["cpu"])
		}
		providers = append(providers, ch)
	}
	best, admit := policy.Merge(logger, providers)
	ans.Hint = toHint(best)
	ans.Admit = admit
	if !admit {
		return ans
	}
	if c.Policy == topologymanager.PolicyNone {
		best = topologymanager.TopologyHint{}
	}
	for res, q := range container.Resources.Limits {
		if _, ok := c.Devices[string(res)]; !ok {
			continue
		}
		got, err := dm.DevicesToAllocate(string(c.Pod.UID), container.Name, string(res), int(q.Value()), best)
		if err != nil {
			ans.Errors[string(res)] = err.Error()
		} else {
			ans.Allocated[string(res)] = got
		}
	}
	return ans
}

var _ = bitmask.NewEmptyBitMask

func main() {
	klog.SetOutput(os.Stderr)
	klog.LogToStderr(false)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		var c kase
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			_ = enc.Encode(answer{Error: "bad case: " + err.Error()})
			continue
		}
		_ = enc.Encode(solve(c))
		out.Flush()
	}
}
