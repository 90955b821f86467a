package aitask

import (
	"encoding/json"

	"github.com/listingkit/listing/app/port"
)

// heldAnswer is an answer as the task holds it (worker.Flow.Hold) when its record step gave
// up after the provider answered: the next delivery records it without asking (and paying)
// the provider again.
type heldAnswer struct {
	Output    json.RawMessage `json:"output"`
	RequestID string          `json:"request_id"`
	Usage     port.Usage      `json:"usage"`
	Model     string          `json:"model"`
}

// hold encodes ans for the task (worker.Flow.Hold).
func hold(ans answer) ([]byte, error) {
	return json.Marshal(heldAnswer{Output: ans.output, RequestID: ans.requestID, Usage: ans.usage, Model: ans.model})
}

// unhold decodes what hold encoded (worker.Flow.Unhold).
func unhold(b []byte) (answer, error) {
	var h heldAnswer
	if err := json.Unmarshal(b, &h); err != nil {
		return answer{}, err
	}
	return answer{output: h.Output, requestID: h.RequestID, billing: billing{usage: h.Usage, model: h.Model}}, nil
}
