package server

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentcube/sandboxpool/nodectl/api"
)

// Handler serves the contract's HTTP API. Every answer, errors included, is JSON.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(api.PathHealthz, s.only(http.MethodGet, func(w http.ResponseWriter, _ *http.Request) {
		h, err := s.Health()
		s.respond(w, h, err, http.StatusServiceUnavailable)
	}))
	mux.Handle(api.PathState, s.only(http.MethodGet, func(w http.ResponseWriter, _ *http.Request) {
		st, err := s.State()
		s.respond(w, st, err, http.StatusInternalServerError)
	}))
	mux.Handle(api.PathReload, s.only(http.MethodPost, func(w http.ResponseWriter, _ *http.Request) {
		st, err := s.Reload()
		s.respond(w, st, err, 0)
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeJSON(w, http.StatusNotFound, &api.Error{Reason: api.ReasonNotFound, Message: "no such path: " + r.URL.Path})
	})
	return mux
}

// only rejects every method but method with a JSON 405.
func (s *Server) only(method string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			s.writeJSON(w, http.StatusMethodNotAllowed, &api.Error{
				Reason:  api.ReasonMethodNotAllowed,
				Message: r.Method + " " + r.URL.Path + " is not allowed; use " + method,
			})
			return
		}
		h(w, r)
	})
}

// respond writes body with 200, or err as an api.Error with errStatus (0: the status of
// the error's reason).
func (s *Server) respond(w http.ResponseWriter, body any, err error, errStatus int) {
	if err == nil {
		s.writeJSON(w, http.StatusOK, body)
		return
	}
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		apiErr = &api.Error{Reason: api.ReasonCgroupError, Message: err.Error()}
	}
	if errStatus == 0 {
		errStatus = apiErr.Reason.HTTPStatus()
	}
	s.writeJSON(w, errStatus, apiErr)
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(body); err != nil {
		s.log.Debug("writing a response failed", "err", err)
	}
}
