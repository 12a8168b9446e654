package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"agent/gateway/api"
	"agent/scheduler"
	"agent/store"
	"agent/supervisor"
)

// Sentinels the handlers return; toError gives them their codes.
var (
	errDraining = errors.New("the gateway is stopping and accepts no new runs; retry against the restarted gateway")
)

// errorf builds a protocol error with a code clients switch on.
func errorf(code, format string, args ...any) *api.Error {
	return &api.Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code == api.CodeUnavailable}
}

// toError maps any error to the protocol's Error. It is the only place
// that does.
func toError(err error) *api.Error {
	var e *api.Error
	var held *store.LeaseHeldError
	var answered *store.AnsweredError
	var fits *supervisor.AnswerError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e
	case errors.Is(err, errDraining):
		return &api.Error{Code: api.CodeUnavailable, Message: err.Error(), Retryable: true}
	case errors.Is(err, scheduler.ErrInvalidJob), errors.Is(err, store.ErrNameTaken):
		return &api.Error{Code: api.CodeInvalidJob, Message: err.Error()}
	case errors.Is(err, scheduler.ErrNotRunning):
		return &api.Error{Code: api.CodeSchedulerOff, Message: err.Error() + "; scheduling is off in this gateway: start it with --scheduler, or set SchedulerEnabled = true in config.toml"}
	case errors.Is(err, store.ErrTickTaken):
		return &api.Error{Code: api.CodeConflict, Message: err.Error(), Retryable: true}
	case errors.Is(err, store.ErrNotFound):
		return &api.Error{Code: api.CodeNotFound, Message: err.Error()}
	case errors.Is(err, store.ErrAmbiguous):
		return &api.Error{Code: api.CodeBadRequest, Message: err.Error()}
	case errors.As(err, &held):
		return &api.Error{Code: api.CodeConflict, Message: err.Error(), Retryable: true}
	case errors.As(err, new(*store.SessionInUseError)):
		return &api.Error{Code: api.CodeConflict, Message: err.Error()}
	case errors.As(err, &answered):
		return &api.Error{Code: api.CodeAnswered, Message: "the wait is " + answered.Error() + ": the first answer wins"}
	case errors.As(err, &fits):
		return &api.Error{Code: api.CodeConflict, Message: fits.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &api.Error{Code: api.CodeUnavailable, Message: err.Error(), Retryable: true}
	}
	return &api.Error{Code: api.CodeInternal, Message: err.Error()}
}

// httpStatus is the HTTP status of an error code.
func httpStatus(code string) int {
	switch code {
	case api.CodeUnauthorized:
		return http.StatusUnauthorized
	case api.CodeForbidden:
		return http.StatusForbidden
	case api.CodeBadRequest, api.CodeInvalidOptions, api.CodeInvalidJob, api.CodeProtocol, api.CodeNotConnected:
		return http.StatusBadRequest
	case api.CodeNotFound, api.CodeUnknownMethod:
		return http.StatusNotFound
	case api.CodeSessionLocked, api.CodeConflict, api.CodeSchedulerOff, api.CodeAnswered:
		return http.StatusConflict
	case api.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
