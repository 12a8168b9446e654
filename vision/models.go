package vision

import (
	"path"
	"strings"
)

// Models are the models known to see images, as glob patterns of their
// names (a provider prefix such as "openai/" is ignored, case too). Any
// other model is given a line of text for each image, unless config.toml
// says vision = true (or a gateway's run.start options.vision). The list is
// written down in docs/PROTOCOL.md#images.
var Models = []string{
	"gpt-4o*", "gpt-4.1*", "gpt-4-turbo*", "gpt-4-vision*", "gpt-5*", "chatgpt-4o*",
	"o1", "o1-20*", "o3", "o3-20*", "o3-pro*", "o4-mini*",
	"claude-*", "gemini-*", "gemma-3*", "gemma3*",
	"llava*", "bakllava*", "qwen*vl*", "qvq*", "pixtral*", "mistral-small-3.1*", "mistral-medium*",
	"llama3.2-vision*", "llama-3.2-*vision*", "llama-4*", "llama4*",
	"minicpm-v*", "moondream*", "internvl*", "grok-*vision*", "grok-4*",
}

// Sees reports whether model is known to see images.
func Sees(model string) bool {
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	model = strings.ToLower(model)
	for _, p := range Models {
		if ok, _ := path.Match(p, model); ok {
			return true
		}
	}
	return false
}
