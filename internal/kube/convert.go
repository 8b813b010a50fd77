package kube

import (
	"fmt"
	"math"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/shardsched/shardsched/api"
)

var maxInt64 = big.NewInt(math.MaxInt64)

// quantityInt converts q to an integer count of 10^scale units, rounding up
// (as Kubernetes does for requests). It reports a negative quantity and one
// that does not fit in int64 as errors naming the resource.
func quantityInt(name string, q resource.Quantity, scale resource.Scale) (int64, error) {
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%w: %s is %s", api.ErrNegative, name, q.String())
	}
	if q.Sign() == 0 {
		// Zero with any exponent ("0e999999999") is zero; don't scale it,
		// which would compute a huge power of ten.
		return 0, nil
	}
	// A whole number held as an int64 ("1", "64", "2Gi", "1G": most
	// requests) needs no big integers, which every pod event would pay for;
	// AsInt64 answers false for anything else (a fraction such as "500m",
	// a quantity held as a decimal), which takes the exact path.
	if v, ok := q.AsInt64(); ok {
		switch scale {
		case 0:
			return v, nil
		case resource.Milli:
			if v > math.MaxInt64/1000 {
				return 0, fmt.Errorf("%w: %s is %s", api.ErrOverflow, name, q.String())
			}
			return v * 1000, nil
		}
	}
	return quantityIntExact(name, q, scale)
}

// quantityIntExact is quantityInt for any non-zero, non-negative quantity,
// in big integers.
func quantityIntExact(name string, q resource.Quantity, scale resource.Scale) (int64, error) {
	dec := q.AsDec() // exact
	// value = unscaled × 10^-decScale; we want ceil(value × 10^-scale).
	unscaled := new(big.Int).Set(dec.UnscaledBig())
	exp := -int64(dec.Scale()) - int64(scale)
	if exp > 40 && unscaled.Sign() != 0 {
		return 0, fmt.Errorf("%w: %s is %s", api.ErrOverflow, name, q.String())
	}
	ten := big.NewInt(10)
	if exp >= 0 {
		unscaled.Mul(unscaled, new(big.Int).Exp(ten, big.NewInt(exp), nil))
	} else {
		if -exp > 400 {
			// Far below one unit: anything non-zero rounds up to 1.
			if unscaled.Sign() == 0 {
				return 0, nil
			}
			return 1, nil
		}
		div := new(big.Int).Exp(ten, big.NewInt(-exp), nil)
		quo, rem := new(big.Int).QuoRem(unscaled, div, new(big.Int))
		if rem.Sign() != 0 {
			quo.Add(quo, big.NewInt(1))
		}
		unscaled = quo
	}
	if unscaled.Cmp(maxInt64) > 0 {
		return 0, fmt.Errorf("%w: %s is %s", api.ErrOverflow, name, q.String())
	}
	return unscaled.Int64(), nil
}

// ResourceFromList converts a ResourceList: cpu to milli-CPU, memory to
// bytes, every other name to a scalar in whole units. Negative or overflowing
// quantities are errors naming the resource; nothing panics.
func ResourceFromList(list corev1.ResourceList) (api.Resource, error) {
	out := api.Resource{}
	for name, q := range list {
		n := string(name)
		var v int64
		var err error
		switch name {
		case corev1.ResourceCPU:
			v, err = quantityInt(n, q, resource.Milli)
		default:
			v, err = quantityInt(n, q, 0)
		}
		if err != nil {
			return api.Resource{}, err
		}
		switch name {
		case corev1.ResourceCPU:
			out.MilliCPU = v
		case corev1.ResourceMemory:
			out.Memory = v
		default:
			out = out.With(n, v)
		}
	}
	return out, nil
}

// LimitFromList converts a capability ResourceList to a Limit: listed
// resources are bounded, the rest unlimited.
func LimitFromList(list corev1.ResourceList) (api.Limit, error) {
	r, err := ResourceFromList(list)
	if err != nil {
		return api.Limit{}, err
	}
	dims := make(map[string]int64, len(list))
	for name := range list {
		dims[string(name)] = r.Get(string(name))
	}
	return api.NewLimit(dims)
}

// ParseQuantity parses one quantity string for the named resource (cpu in
// milli-CPU, everything else in whole units, rounded up). It is used for
// flags and manifests; a negative, overflowing or malformed quantity is an
// error naming the resource.
func ParseQuantity(name, s string) (int64, error) {
	if err := checkExponent(s); err != nil {
		return 0, fmt.Errorf("%s: %q: %w", name, s, err)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	scale := resource.Scale(0)
	if name == string(corev1.ResourceCPU) {
		scale = resource.Milli
	}
	return quantityInt(name, q, scale)
}

// QueueSpecFromVolcano converts a Volcano Queue. spec.dequeueStrategy is
// passed through as is (api.BuildTreePartial validates it; Volcano's CRD
// defaults it to traverse, an absent value means fifo here).
func QueueSpecFromVolcano(q *schedv1beta1.Queue) (api.QueueSpec, error) {
	capability, err := LimitFromList(q.Spec.Capability)
	if err != nil {
		return api.QueueSpec{}, fmt.Errorf("queue %q capability: %w", q.Name, err)
	}
	deserved, err := ResourceFromList(q.Spec.Deserved)
	if err != nil {
		return api.QueueSpec{}, fmt.Errorf("queue %q deserved: %w", q.Name, err)
	}
	guarantee, err := ResourceFromList(q.Spec.Guarantee.Resource)
	if err != nil {
		return api.QueueSpec{}, fmt.Errorf("queue %q guarantee: %w", q.Name, err)
	}
	w := q.Spec.Weight
	if w > math.MaxInt32 {
		return api.QueueSpec{}, fmt.Errorf("queue %q: weight %d out of range", q.Name, w)
	}
	return api.QueueSpec{
		Name:       q.Name,
		Parent:     q.Spec.Parent,
		Capability: capability,
		Deserved:   deserved,
		Guarantee:  guarantee,
		Weight:     int32(w),
		// Volcano's DequeueStrategy values are the api's.
		DequeueStrategy: string(q.Spec.DequeueStrategy),
		Closed:          q.Status.State == schedv1beta1.QueueStateClosed || q.Status.State == schedv1beta1.QueueStateClosing,
		NotReclaimable:  q.Spec.Reclaimable != nil && !*q.Spec.Reclaimable,
		Priority:        q.Spec.Priority,
	}, nil
}

// checkExponent rejects negative decimal exponents beyond -9999 before they
// reach apimachinery, whose parser spends unbounded time on them (a 12-byte
// flag value such as "1e-999999999" would hang start-up). Huge positive
// exponents parse quickly and are reported as overflow later.
func checkExponent(s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] != 'e' && s[i] != 'E' {
			continue
		}
		j := i + 1
		if j >= len(s) || s[j] != '-' {
			continue
		}
		j++
		digits := 0
		for ; j < len(s) && s[j] == '0'; j++ {
		}
		for ; j < len(s) && s[j] >= '0' && s[j] <= '9'; j++ {
			digits++
		}
		if digits > 4 {
			return fmt.Errorf("negative exponent out of range (at most -9999)")
		}
	}
	return nil
}
