package flow

import (
	"errors"
	"fmt"
)

// Sentinel errors. The api package maps each to a status code.
var (
	ErrNotFound = errors.New("not found")
	ErrInvalid  = errors.New("invalid")
	ErrBusy     = errors.New("a run is in progress on this instance")
	ErrTooMany  = errors.New("too many runs in flight")
	ErrClosed   = errors.New("the server is shutting down")
	ErrIdle     = errors.New("no run in progress")
	ErrNoReview = errors.New("the instance is not awaiting review")
	ErrNoWait   = errors.New("the instance is not awaiting its client's tool results")

	// ErrInputInFlight is ErrTooMany for the input the runs in flight hold
	// (Engine.MaxInput): a run's memory grows with its input.
	ErrInputInFlight = fmt.Errorf("too much input in flight: %w", ErrTooMany)

	// Errors a run can fail with; each has a stable code (ErrorCode).
	ErrModelUnavailable = errors.New("model unavailable")
	ErrModelOutput      = errors.New("unusable model output")
	ErrToolFailed       = errors.New("tool failed")
	ErrTimeout          = errors.New("timed out")
	// ErrStorage is a write of the store that failed (a full disk, a lost
	// database): a run whose events could not all be saved ends failed,
	// never completed.
	ErrStorage = errors.New("the run's events could not be saved")
)

// ErrorCode is the stable word an error event carries for err.
func ErrorCode(err error) string {
	switch {
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrModelUnavailable):
		return "llm_unavailable"
	case errors.Is(err, ErrModelOutput):
		return "llm_bad_output"
	case errors.Is(err, ErrToolFailed):
		return "tool_failed"
	case errors.Is(err, ErrStorage):
		return "storage"
	}
	return "internal"
}

// ErrCorrupt is the error of a read that found stored data other than what
// was written: a store that keeps a checksum with each row reports the row
// instead of serving what it holds now.
var ErrCorrupt = errors.New("corrupt: the stored bytes do not match their checksum")
