package aitask

import (
	"strings"
	"unicode/utf8"

	"github.com/listingkit/listing/domain"
)

// Bounds of what a prompt quotes from the product, in characters.
const (
	maxPromptTitle       = 500
	maxPromptDescription = 4000
	// MaxCategoryLength bounds a category path in the output, in characters.
	MaxCategoryLength = 500
)

// Default instructions when the client gave none.
const (
	defaultTextInstruction  = "Write a compelling, factual product description for an online marketplace listing."
	defaultImageInstruction = "A clean, realistic product photo on a plain white background, no text."
)

// prompt builds the provider request's prompt of a task. It is a pure function of what the
// task stores — its kind, the client's instruction and the product snapshot taken with the
// request — and never reads the product's current content, so every delivery sends the same
// request (and the provider can answer a redelivery from its Idempotency-Key cache). A task
// without a snapshot (the handler captures one before calling) quotes an empty product.
func prompt(t domain.AITask) string {
	var p domain.ProductSnapshot
	if t.Snapshot != nil {
		p = *t.Snapshot
	}
	kind, instruction := t.Kind, strings.TrimSpace(t.Prompt)
	var b strings.Builder
	switch kind {
	case domain.AIKindCategory:
		b.WriteString("Classify the product below into a marketplace category. Answer with the category path only, " +
			"from the most general level to the most specific, levels separated by \" > \" " +
			"(for example: Home & Garden > Kitchen > Cookware). No other text.")
		if instruction != "" {
			b.WriteString("\nAdditional instructions: ")
			b.WriteString(instruction)
		}
	case domain.AIKindImage:
		if instruction == "" {
			instruction = defaultImageInstruction
		}
		b.WriteString(instruction)
	default:
		if instruction == "" {
			instruction = defaultTextInstruction
		}
		b.WriteString(instruction)
	}
	b.WriteString("\n\nProduct title: ")
	b.WriteString(truncate(p.Title, maxPromptTitle))
	if d := strings.TrimSpace(p.Description); d != "" {
		b.WriteString("\nProduct description: ")
		b.WriteString(truncate(d, maxPromptDescription))
	}
	return b.String()
}

// category reads a category path out of a model's answer: the first non-empty line, without
// quotes, markup or a "Category:" label, its levels trimmed and joined with " > ". It returns
// "" when nothing usable is left.
func category(answer string) string {
	for _, line := range strings.Split(answer, "\n") {
		line = strings.Trim(strings.TrimSpace(line), "\"'`*#-. ")
		if len(line) >= len("category:") && strings.EqualFold(line[:len("category:")], "category:") {
			line = strings.TrimSpace(line[len("category:"):])
		}
		var levels []string
		for _, l := range strings.Split(line, ">") {
			if l = strings.Trim(strings.TrimSpace(l), "\"'`*"); l != "" {
				levels = append(levels, strings.Join(strings.Fields(l), " "))
			}
		}
		if len(levels) > 0 {
			return truncate(strings.Join(levels, " > "), MaxCategoryLength)
		}
	}
	return ""
}

// truncate keeps at most n characters of s.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}
