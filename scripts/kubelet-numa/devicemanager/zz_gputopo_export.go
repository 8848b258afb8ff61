// Added by `scripts/build-k8s-tools.sh --kubelet-numa` to a verbatim copy of the non-test files
// of k8s.io/kubernetes@v1.36.3/pkg/kubelet/cm/devicemanager (Go refuses overlays inside the
// module cache, and the package has no exported way to set its device state), so that
// scripts/kubelet-numa runs the device manager's own GetTopologyHints and devicesToAllocate
// on a hand-made device state. The upstream files are not changed; this file only adds an
// exported constructor and wrappers.

package devicemanager

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// GputopoDevice is one device as a device plugin lists it.
type GputopoDevice struct {
	ID        string
	NUMA      int // -1 = no TopologyInfo
	Healthy   bool
	Allocated bool
}

// GputopoPreferred answers GetPreferredAllocation(available, mustInclude, size).
type GputopoPreferred func(available, mustInclude []string, size int) ([]string, error)

type gputopoEndpoint struct{ preferred GputopoPreferred }

func (e *gputopoEndpoint) getPreferredAllocation(_ context.Context, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error) {
	ids, err := e.preferred(available, mustInclude, size)
	if err != nil {
		return nil, err
	}
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: ids}}}, nil
}
func (e *gputopoEndpoint) allocate(context.Context, []string) (*pluginapi.AllocateResponse, error) {
	return nil, fmt.Errorf("not used")
}
func (e *gputopoEndpoint) preStartContainer(context.Context, []string) (*pluginapi.PreStartContainerResponse, error) {
	return nil, fmt.Errorf("not used")
}
func (e *gputopoEndpoint) setStopTime(time.Time)        {}
func (e *gputopoEndpoint) isStopped() bool              { return false }
func (e *gputopoEndpoint) stopGracePeriodExpired() bool { return false }

type gputopoStore struct{ hint topologymanager.TopologyHint }

func (s *gputopoStore) GetAffinity(string, string) topologymanager.TopologyHint { return s.hint }
func (s *gputopoStore) GetPolicy() topologymanager.Policy                      { return nil }
func (s *gputopoStore) Name() string                                           { return "gputopo" }

// GputopoManager is a device manager holding the given devices, with its allocations set as
// the kubelet would have them after earlier pods.
type GputopoManager struct{ m *ManagerImpl }

// NewGputopoManager builds a manager over machine NUMA nodes and resource -> devices;
// preferred[resource] plays the device plugin (GetPreferredAllocationAvailable = true).
func NewGputopoManager(numaNodes []int, devices map[string][]GputopoDevice, preferred map[string]GputopoPreferred) *GputopoManager {
	m := &ManagerImpl{
		endpoints:        make(map[string]endpointInfo),
		allDevices:       NewResourceDeviceInstances(),
		healthyDevices:   make(map[string]sets.Set[string]),
		unhealthyDevices: make(map[string]sets.Set[string]),
		allocatedDevices: make(map[string]sets.Set[string]),
		podDevices:       newPodDevices(),
		numaNodes:        numaNodes,
		devicesToReuse:   make(PodReusableDevices),
		sourcesReady:     &sourcesReadyStub{},
		activePods:       func() []*v1.Pod { return nil },
	}
	for res, devs := range devices {
		m.allDevices[res] = make(DeviceInstances)
		m.healthyDevices[res] = sets.New[string]()
		m.unhealthyDevices[res] = sets.New[string]()
		m.allocatedDevices[res] = sets.New[string]()
		for _, d := range devs {
			dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
			if d.NUMA >= 0 {
				dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMA)}}}
			}
			if !d.Healthy {
				dev.Health = pluginapi.Unhealthy
				m.unhealthyDevices[res].Insert(d.ID)
			} else {
				m.healthyDevices[res].Insert(d.ID)
			}
			if d.Allocated {
				m.allocatedDevices[res].Insert(d.ID)
			}
			m.allDevices[res][d.ID] = dev
		}
		m.endpoints[res] = endpointInfo{
			e:    &gputopoEndpoint{preferred: preferred[res]},
			opts: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		}
	}
	return &GputopoManager{m: m}
}

// TopologyHints is GetTopologyHints (container scope) or GetPodTopologyHints (pod scope).
func (g *GputopoManager) TopologyHints(pod *v1.Pod, container *v1.Container, podScope bool) map[string][]topologymanager.TopologyHint {
	if podScope {
		return g.m.GetPodTopologyHints(pod)
	}
	return g.m.GetTopologyHints(pod, container)
}

// DevicesToAllocate runs devicesToAllocate for one resource of one container whose merged
// affinity is hint.
func (g *GputopoManager) DevicesToAllocate(podUID, container, resource string, required int, hint topologymanager.TopologyHint) ([]string, error) {
	g.m.topologyAffinityStore = &gputopoStore{hint: hint}
	got, err := g.m.devicesToAllocate(context.Background(), podUID, container, resource, required, sets.New[string]())
	if err != nil {
		return nil, err
	}
	return sets.List(got), nil
}
