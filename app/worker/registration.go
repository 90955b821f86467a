package worker

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Registration is one flow as the engine runs it: its declaration (Spec) and how its task
// kind and job handler are built from the dependencies they declare. A flow makes it once,
// in its own package, with Register; app/worker/flows lists the registrations, and the
// assembly builds every flow from them (flows.Kinds, flows.Handlers) without naming one.
type Registration struct {
	Spec
	kind, handler builder
}

// builder builds a task kind or a handler from a struct of dependencies (needs), filled by
// type from a process's Provided.
type builder struct {
	needs reflect.Type
	build func(needs reflect.Value) (any, error)
}

// Register declares a flow: s, and the builders of its task kind and its job handler. K and
// H are structs whose exported fields are the dependencies each builder needs (ports,
// worker.Deps, worker.Settings…); the engine fills every field by its type from what the
// process provides (Provide) and refuses to build a flow one of whose fields it cannot fill.
// The task kind is built in every process that runs the engine (dispatcher, reconciler,
// workers), the handler only in processes that consume jobs: K names no dependency that
// only workers have (the marketplace, the AI provider, storage).
func Register[K, H any](s Spec, kind func(K) (TaskKind, error), handler func(H) (Handler, error)) Registration {
	r := Registration{Spec: s}
	if kind != nil {
		r.kind = builder{needs: reflect.TypeFor[K](), build: func(v reflect.Value) (any, error) { return kind(v.Interface().(K)) }}
	}
	if handler != nil {
		r.handler = builder{needs: reflect.TypeFor[H](), build: func(v reflect.Value) (any, error) { return handler(v.Interface().(H)) }}
	}
	return r
}

// Check reports every part r lacks or declares inconsistently (Spec.Check, a missing builder,
// a builder whose needs are not a struct of exported fields), each named by flow.
func (r Registration) Check() error {
	errs := []error{r.Spec.Check()}
	for _, b := range []struct {
		what string
		b    builder
	}{{"task kind", r.kind}, {"handler", r.handler}} {
		if b.b.build == nil {
			errs = append(errs, fmt.Errorf("flow %s: no %s builder (Register)", r.Name, b.what))
			continue
		}
		if err := b.b.checkNeeds(); err != nil {
			errs = append(errs, fmt.Errorf("flow %s: the %s's needs: %w", r.Name, b.what, err))
		}
	}
	return errors.Join(errs...)
}

// Kind builds r's task kind from p. The kind's queue must be r's, and it takes a last look
// exactly when r's Spec declares one (Spec.LastLook.Asks).
func (r Registration) Kind(p Provided) (TaskKind, error) {
	v, err := r.kind.make(r.Name, "task kind", p)
	if err != nil {
		return nil, err
	}
	k, ok := v.(TaskKind)
	switch {
	case !ok || k == nil:
		return nil, fmt.Errorf("flow %s: the task kind builder returned no task kind", r.Name)
	case k.Queue() != r.Queue:
		return nil, fmt.Errorf("flow %s: the task kind's queue %s is not the flow's queue %s", r.Name, k.Queue(), r.Queue)
	}
	if l, ok := k.(interface{ TakesLastLook() bool }); ok && l.TakesLastLook() != (r.LastLook.Asks != "") {
		return nil, fmt.Errorf("flow %s: the task kind's last look (AsksLastLook %t) is not the one Spec.LastLook declares",
			r.Name, l.TakesLastLook())
	}
	if a, ok := k.(interface{ accepts() bool }); r.Start != nil && (!ok || !a.accepts()) {
		return nil, fmt.Errorf("flow %s: entry point %s, but the task kind has no Accept", r.Name, r.Start.Type)
	}
	return k, nil
}

// accepts reports whether k starts its tasks itself (Accept, for Spec.Start).
func (k Kind[T]) accepts() bool { return k.Accept != nil }

// Handler builds r's job handler from p.
func (r Registration) Handler(p Provided) (Handler, error) {
	v, err := r.handler.make(r.Name, "handler", p)
	if err != nil {
		return nil, err
	}
	h, ok := v.(Handler)
	if !ok || h == nil {
		return nil, fmt.Errorf("flow %s: the handler builder returned no handler", r.Name)
	}
	return h, nil
}

// TakesLastLook reports AsksLastLook: a registration checks it against its Spec.
func (k Kind[T]) TakesLastLook() bool { return k.AsksLastLook }

func (b builder) checkNeeds() error {
	if b.needs.Kind() != reflect.Struct {
		return fmt.Errorf("%s is not a struct", b.needs)
	}
	for i := range b.needs.NumField() {
		if f := b.needs.Field(i); !f.IsExported() {
			return fmt.Errorf("field %s of %s is not exported: it cannot be provided", f.Name, b.needs)
		}
	}
	return nil
}

// make fills b's needs from p and builds; every field p cannot fill is named in the error.
func (b builder) make(flow, what string, p Provided) (any, error) {
	if b.build == nil {
		return nil, fmt.Errorf("flow %s: no %s builder (Register)", flow, what)
	}
	if err := b.checkNeeds(); err != nil {
		return nil, fmt.Errorf("flow %s: the %s's needs: %w", flow, what, err)
	}
	v := reflect.New(b.needs).Elem()
	var errs []error
	for i := range b.needs.NumField() {
		f := b.needs.Field(i)
		got, err := p.find(f.Type)
		if err != nil {
			errs = append(errs, fmt.Errorf("flow %s: the %s needs %s (%s): %w", flow, what, f.Name, f.Type, err))
			continue
		}
		v.Field(i).Set(got)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out, err := b.build(v)
	if err != nil {
		return nil, fmt.Errorf("flow %s: %w", flow, err)
	}
	return out, nil
}

// Provided are the dependencies a process offers the flows' builders (Register), found by
// type: a field takes the value of exactly its type, or else the one value that implements
// its interface type.
type Provided struct{ values []reflect.Value }

// Provide returns the dependencies values. Nil values (a process without a marketplace) are
// left out, so a builder that needs them is refused by name; a value given twice counts once.
func Provide(values ...any) Provided {
	var p Provided
	for _, x := range values {
		v := reflect.ValueOf(x)
		if !v.IsValid() {
			continue
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan:
			if v.IsNil() {
				continue
			}
		}
		if slices.ContainsFunc(p.values, func(o reflect.Value) bool { return o.Type() == v.Type() && v.Comparable() && o.Equal(v) }) {
			continue
		}
		p.values = append(p.values, v)
	}
	return p
}

func (p Provided) find(t reflect.Type) (reflect.Value, error) {
	var match []reflect.Value
	for _, v := range p.values {
		if v.Type() == t {
			return v, nil
		}
		if t.Kind() == reflect.Interface && v.Type().Implements(t) {
			match = append(match, v)
		}
	}
	switch len(match) {
	case 0:
		return reflect.Value{}, errors.New("not provided in this process")
	case 1:
		return match[0].Convert(t), nil
	default:
		return reflect.Value{}, fmt.Errorf("provided %d times (%s and %s)", len(match), match[0].Type(), match[1].Type())
	}
}

// Settings are the configured values (infra/config) flows may need; a flow's builder names
// it as a field like any dependency.
type Settings struct {
	// PlatformTimeout is the marketplace gateway's time-out of one call (PLATFORM_TIMEOUT).
	PlatformTimeout time.Duration
	// AITimeout is the AI provider's time-out of one call (AI_TIMEOUT).
	AITimeout time.Duration
	// MediaMaxBytes bounds a media's size (MEDIA_MAX_BYTES).
	MediaMaxBytes int64
	// MediaDecodes bounds the originals a process holds decoded at once
	// (MEDIA_DECODE_CONCURRENCY).
	MediaDecodes int
	// AITextModel is the chat model of text and category AI tasks (AI_TEXT_MODEL).
	AITextModel string
}
