package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"agent/scheduler"
	"agent/store"
)

// Sentinels the handlers return; toError gives them their codes.
var (
	errDraining = errors.New("the gateway is stopping and accepts no new runs; retry against the restarted gateway")
)

// errorf builds a protocol error with a code clients switch on.
func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code == CodeUnavailable}
}

// toError maps any error to the protocol's Error. It is the only place
// that does.
func toError(err error) *Error {
	var e *Error
	var held *store.LeaseHeldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e
	case errors.Is(err, errDraining):
		return &Error{Code: CodeUnavailable, Message: err.Error(), Retryable: true}
	case errors.Is(err, scheduler.ErrInvalidJob), errors.Is(err, store.ErrNameTaken):
		return &Error{Code: CodeInvalidJob, Message: err.Error()}
	case errors.Is(err, scheduler.ErrNotRunning):
		return &Error{Code: CodeSchedulerOff, Message: err.Error() + "; scheduling is off in this gateway: start it with --scheduler, or set SchedulerEnabled = true in config.toml"}
	case errors.Is(err, store.ErrTickTaken):
		return &Error{Code: CodeConflict, Message: err.Error(), Retryable: true}
	case errors.Is(err, store.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, store.ErrAmbiguous):
		return &Error{Code: CodeBadRequest, Message: err.Error()}
	case errors.As(err, &held):
		return &Error{Code: CodeConflict, Message: err.Error(), Retryable: true}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: err.Error(), Retryable: true}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// httpStatus is the HTTP status of an error code.
func httpStatus(code string) int {
	switch code {
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeBadRequest, CodeInvalidOptions, CodeInvalidJob, CodeProtocol, CodeNotConnected:
		return http.StatusBadRequest
	case CodeNotFound, CodeUnknownMethod:
		return http.StatusNotFound
	case CodeSessionLocked, CodeConflict, CodeSchedulerOff:
		return http.StatusConflict
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
