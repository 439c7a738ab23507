// Command oracle runs upstream's DRA structured allocator (k8s.io/dynamic-resource-allocation) on
// scenarios read as JSON lines from stdin and writes one JSON answer line per scenario to stdout,
// so one process can judge thousands of generated cases.
//
// A scenario is a case of tests/data/conformance (name, features, applyDefaults, deviceClasses,
// resourceSlices, claims, node, allocatedDevices, allocatedSharedDeviceIDs, aggregatedCapacity)
// plus optional "nodes" (several candidate nodes, each answered), "implementation" ("stable",
// "incubating" or "experimental": the only one NewAllocator may pick; empty: the one the
// scheduler would pick, the most stable that supports the features) and "timeoutSeconds"
// (default 10, the scheduler's filter timeout). The answer names the implementation that ran and,
// per node, "allocated" with the AllocationResults, "unschedulable", or "error" with the error
// text and whether it is node-scoped (ErrFailedAllocationOnNode).
//
// The same source builds against each supported version (go.mod: v0.36.x, go137.mod: v0.37.x).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	sigsjson "sigs.k8s.io/json"
)

type sharedID struct {
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID"`
}

type aggregated struct {
	Driver           string                                          `json:"driver"`
	Pool             string                                          `json:"pool"`
	Device           string                                          `json:"device"`
	ConsumedCapacity map[resourceapi.QualifiedName]resource.Quantity `json:"consumedCapacity"`
}

type scenario struct {
	Name           string                       `json:"name"`
	Implementation string                       `json:"implementation"`
	Features       json.RawMessage              `json:"features"`
	ApplyDefaults  bool                         `json:"applyDefaults"`
	DeviceClasses  []*resourceapi.DeviceClass   `json:"deviceClasses"`
	ResourceSlices []*resourceapi.ResourceSlice `json:"resourceSlices"`
	Claims         []*resourceapi.ResourceClaim `json:"claims"`
	Node           *v1.Node                     `json:"node"`
	Nodes          []*v1.Node                   `json:"nodes"`
	Allocated      []string                     `json:"allocatedDevices"`
	SharedIDs      []sharedID                   `json:"allocatedSharedDeviceIDs"`
	Aggregated     []aggregated                 `json:"aggregatedCapacity"`
	TimeoutSeconds float64                      `json:"timeoutSeconds"`
}

type nodeAnswer struct {
	Node            string                         `json:"node"`
	Status          string                         `json:"status"`
	Error           string                         `json:"error,omitempty"`
	NodeScopedError bool                           `json:"nodeScopedError"`
	Allocations     []resourceapi.AllocationResult `json:"allocations,omitempty"`
	Seconds         float64                        `json:"seconds"`
	// Steps counts upstream's allocateOne calls for this node (0 where the implementation keeps
	// no statistics), to compare the size of our search with upstream's.
	Steps int64 `json:"steps"`
}

type answer struct {
	Name           string `json:"name"`
	Version        string `json:"version"`
	Implementation string `json:"implementation,omitempty"`
	// Error is set when no allocator could be made (or the scenario is malformed); Nodes is then empty.
	Error string       `json:"error,omitempty"`
	Nodes []nodeAnswer `json:"nodes"`
}

// classLister answers as the informer's lister does, including its not-found error text.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclass"), name)
}

// applyDefaults does what the API server's defaulting does to a claim before it is stored
// (pkg/apis/resource/v1/defaults.go and zz_generated.defaults.go).
func applyDefaults(claim *resourceapi.ResourceClaim) {
	tolerations := func(ts []resourceapi.DeviceToleration) {
		for i := range ts {
			if ts[i].Operator == "" {
				ts[i].Operator = resourceapi.DeviceTolerationOpEqual
			}
		}
	}
	for i := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[i]
		if e := r.Exactly; e != nil {
			if e.AllocationMode == "" {
				e.AllocationMode = resourceapi.DeviceAllocationModeExactCount
			}
			if e.AllocationMode == resourceapi.DeviceAllocationModeExactCount && e.Count == 0 {
				e.Count = 1
			}
			tolerations(e.Tolerations)
		}
		for j := range r.FirstAvailable {
			s := &r.FirstAvailable[j]
			if s.AllocationMode == "" {
				s.AllocationMode = resourceapi.DeviceAllocationModeExactCount
			}
			if s.AllocationMode == resourceapi.DeviceAllocationModeExactCount && s.Count == 0 {
				s.Count = 1
			}
			tolerations(s.Tolerations)
		}
	}
}

func allocatedState(s *scenario) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, id := range s.Allocated {
		parts := strings.SplitN(id, "/", 3)
		if len(parts) == 3 {
			state.AllocatedDevices.Insert(structured.MakeDeviceID(parts[0], parts[1], parts[2]))
		}
	}
	for _, shared := range s.SharedIDs {
		uid := types.UID(shared.ShareID)
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(structured.MakeDeviceID(shared.Driver, shared.Pool, shared.Device), &uid))
	}
	for _, a := range s.Aggregated {
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(structured.MakeDeviceID(a.Driver, a.Pool, a.Device), a.ConsumedCapacity))
	}
	return state
}

// implementationOf names the package of the allocator NewAllocator picked ("*incubating.Allocator").
func implementationOf(a structured.Allocator) string {
	name := strings.TrimPrefix(fmt.Sprintf("%T", a), "*")
	if before, _, ok := strings.Cut(name, "."); ok {
		return before
	}
	return name
}

func run(ctx context.Context, version string, line []byte) (out answer) {
	var s scenario
	defer func() {
		// One bad scenario must not end a process that judges thousands.
		if r := recover(); r != nil {
			out = answer{Name: s.Name, Version: version, Error: fmt.Sprintf("panic: %v\n%s", r, debug.Stack()), Nodes: []nodeAnswer{}}
		}
	}()
	out = answer{Version: version, Nodes: []nodeAnswer{}}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(line, &s); err != nil {
		out.Error = "oracle: malformed scenario: " + err.Error()
		return out
	}
	out.Name = s.Name
	var features structured.Features
	if len(s.Features) > 0 {
		// Field names of structured.Features; a version without a field ignores it.
		if err := json.Unmarshal(s.Features, &features); err != nil {
			out.Error = "oracle: malformed features: " + err.Error()
			return out
		}
	}
	if s.ApplyDefaults {
		for _, claim := range s.Claims {
			applyDefaults(claim)
		}
	}
	classes := classLister{}
	for _, c := range s.DeviceClasses {
		classes[c.Name] = c
	}
	if s.Implementation != "" {
		structured.EnableAllocators(s.Implementation)
	} else {
		structured.EnableAllocators()
	}
	celCache := cel.NewCache(10, cel.Features{EnableConsumableCapacity: features.ConsumableCapacity, EnableListTypeAttributes: features.ListTypeAttributes})
	allocator, err := structured.NewAllocator(ctx, features, allocatedState(&s), classes, s.ResourceSlices, celCache)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Implementation = implementationOf(allocator)
	nodes := s.Nodes
	if len(nodes) == 0 && s.Node != nil {
		nodes = []*v1.Node{s.Node}
	}
	timeout := 10 * time.Second
	if s.TimeoutSeconds > 0 {
		timeout = time.Duration(s.TimeoutSeconds * float64(time.Second))
	}
	for _, node := range nodes {
		nodeCtx, cancel := context.WithTimeout(ctx, timeout)
		before := steps(allocator)
		started := time.Now()
		results, err := allocator.Allocate(nodeCtx, node, s.Claims)
		cancel()
		a := nodeAnswer{Node: node.Name, Seconds: time.Since(started).Seconds(), Steps: steps(allocator) - before}
		switch {
		case err != nil:
			a.Status = "error"
			a.Error = err.Error()
			a.NodeScopedError = errors.Is(err, structured.ErrFailedAllocationOnNode)
		case results == nil:
			a.Status = "unschedulable"
		default:
			a.Status = "allocated"
			a.Allocations = results
		}
		out.Nodes = append(out.Nodes, a)
	}
	return out
}

// steps reads the allocator's GetStats().NumAllocateOneInvocations, which the incubating and
// experimental implementations keep (their Stats type is internal, hence reflection).
func steps(a structured.Allocator) int64 {
	method := reflect.ValueOf(a).MethodByName("GetStats")
	if !method.IsValid() {
		return 0
	}
	field := method.Call(nil)[0].FieldByName("NumAllocateOneInvocations")
	if !field.IsValid() {
		return 0
	}
	return field.Int()
}

// moduleVersion is the version of k8s.io/dynamic-resource-allocation this binary was built with.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/dynamic-resource-allocation" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(moduleVersion())
		return
	}
	version := moduleVersion()
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)
	ctx := context.Background()
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			if encodeErr := encoder.Encode(run(ctx, version, line)); encodeErr != nil {
				fmt.Fprintln(os.Stderr, "oracle:", encodeErr)
				os.Exit(1)
			}
			// The caller waits for each answer before it sends the next scenario.
			if flushErr := out.Flush(); flushErr != nil {
				os.Exit(1)
			}
		}
		if err != nil {
			return
		}
	}
}
