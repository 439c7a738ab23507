// Added by tests/conformance/dumping.py to a temporary copy of k8s.io/dynamic-resource-allocation
// (never to the module cache): runs upstream's shared allocator test table through the
// experimental implementation and writes every Allocate call, inputs and answer, as one JSON
// line to $DRA_DUMP_FILE. Assertions of the table are upstream's and still run.
package experimental

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured/internal"
	"k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

var dumpMutex sync.Mutex

type dumpShared struct {
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID"`
}

type dumpAggregated struct {
	Driver           string            `json:"driver"`
	Pool             string            `json:"pool"`
	Device           string            `json:"device"`
	ConsumedCapacity map[string]string `json:"consumedCapacity"`
}

type dumpRecord struct {
	Name                     string                         `json:"name"`
	Features                 internal.Features              `json:"features"`
	DeviceClasses            []*resourceapi.DeviceClass     `json:"deviceClasses"`
	ResourceSlices           []*resourceapi.ResourceSlice   `json:"resourceSlices"`
	Claims                   []*resourceapi.ResourceClaim   `json:"claims"`
	Node                     *v1.Node                       `json:"node"`
	AllocatedDevices         []string                       `json:"allocatedDevices,omitempty"`
	AllocatedSharedDeviceIDs []dumpShared                   `json:"allocatedSharedDeviceIDs,omitempty"`
	AggregatedCapacity       []dumpAggregated               `json:"aggregatedCapacity,omitempty"`
	Status                   string                         `json:"status"`
	Error                    string                         `json:"error,omitempty"`
	NodeScopedError          bool                           `json:"nodeScopedError"`
	Allocations              []resourceapi.AllocationResult `json:"allocations,omitempty"`
}

type dumpAllocator struct {
	internal.Allocator
	record dumpRecord
}

func (d *dumpAllocator) Allocate(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	record := d.record
	record.Node = node.DeepCopy()
	for _, claim := range claims {
		record.Claims = append(record.Claims, claim.DeepCopy())
	}
	results, err := d.Allocator.Allocate(ctx, node, claims)
	switch {
	case err != nil:
		record.Status, record.Error = "error", err.Error()
		record.NodeScopedError = errors.Is(err, internal.ErrFailedAllocationOnNode)
	case results == nil:
		record.Status = "unschedulable"
	default:
		record.Status, record.Allocations = "allocated", results
	}
	line, marshalErr := json.Marshal(record)
	if marshalErr != nil {
		panic(marshalErr)
	}
	dumpMutex.Lock()
	defer dumpMutex.Unlock()
	file, openErr := os.OpenFile(os.Getenv("DRA_DUMP_FILE"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if openErr != nil {
		panic(openErr)
	}
	defer file.Close()
	if _, writeErr := file.Write(append(line, '\n')); writeErr != nil {
		panic(writeErr)
	}
	return results, err
}

// testName reads the subtest's name from the ktesting logger the table puts into ctx.
func testName(ctx context.Context) string {
	if underlier, ok := klog.FromContext(ctx).GetSink().(ktesting.Underlier); ok {
		if named, ok := underlier.GetUnderlying().(interface{ Name() string }); ok {
			return named.Name()
		}
	}
	return "unknown"
}

func TestDump(t *testing.T) {
	allocatortesting.TestAllocator(t, SupportedFeatures, func(
		ctx context.Context,
		features Features,
		allocatedState AllocatedState,
		classLister DeviceClassLister,
		slices []*resourceapi.ResourceSlice,
		celCache *cel.Cache,
	) (internal.Allocator, error) {
		allocator, err := NewAllocator(ctx, features, allocatedState, classLister, slices, celCache)
		if err != nil {
			return nil, err
		}
		classes, _ := classLister.List()
		record := dumpRecord{Name: testName(ctx), Features: features}
		for _, class := range classes {
			record.DeviceClasses = append(record.DeviceClasses, class.DeepCopy())
		}
		for _, slice := range slices {
			record.ResourceSlices = append(record.ResourceSlices, slice.DeepCopy())
		}
		for id := range allocatedState.AllocatedDevices {
			record.AllocatedDevices = append(record.AllocatedDevices, id.String())
		}
		for id := range allocatedState.AllocatedSharedDeviceIDs {
			device := id.GetDeviceID()
			record.AllocatedSharedDeviceIDs = append(record.AllocatedSharedDeviceIDs, dumpShared{
				Driver: device.Driver.String(), Pool: device.Pool.String(), Device: device.Device.String(), ShareID: id.ShareID.String(),
			})
		}
		for id, consumed := range allocatedState.AggregatedCapacity {
			entry := dumpAggregated{Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String(), ConsumedCapacity: map[string]string{}}
			for name, quantity := range consumed {
				entry.ConsumedCapacity[string(name)] = quantity.String()
			}
			record.AggregatedCapacity = append(record.AggregatedCapacity, entry)
		}
		return &dumpAllocator{Allocator: allocator, record: record}, nil
	})
}
