package wire

import "errors"

// ErrBindUnknown marks a bind whose outcome is unknown: the call timed out,
// its connection broke or the server answered that it may still be
// processing it, so the pod may be bound (or may be bound later). A binder
// wraps its error with it; the scheduler then keeps the pod's room on the
// node instead of giving it to another pod, and asks again.
var ErrBindUnknown = errors.New("the bind's outcome is unknown")
