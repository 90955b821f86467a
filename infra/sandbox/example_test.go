package sandbox_test

import (
	"context"
	"fmt"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/infra/ai"
	"github.com/listingkit/listing/infra/platform"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
)

// How `app all` runs without PLATFORM_BASE_URL and AI_BASE_URL: start the sandboxes on free
// loopback ports and point the real adapters at them.
func Example() {
	ctx := context.Background()

	mk, _ := marketplace.New(marketplace.Config{})
	mkSrv, _ := sandbox.Start("", mk)
	defer mkSrv.Close()
	aiSb, _ := aiprovider.New(aiprovider.Config{})
	aiSrv, _ := sandbox.Start("", aiSb)
	defer aiSrv.Close()

	gateway, _ := platform.New(platform.Config{BaseURL: mkSrv.URL})
	provider, _ := ai.New(ai.Config{BaseURL: aiSrv.URL, APIKey: "sk-dev"})

	creds, _ := port.NewCredentials("sk_test_demo")
	res, _ := gateway.VerifyStore(ctx, creds, "sandbox", "shop-1")
	fmt.Println(res.Valid, res.ShopName, creds)

	p, _ := gateway.CreateProduct(ctx, creds, "pub-1", port.ProductInput{ExternalRef: "pub-1", Title: "Mug", Price: "9.50", Currency: "EUR"})
	again, _ := gateway.CreateProduct(ctx, creds, "pub-1", port.ProductInput{ExternalRef: "pub-1", Title: "Mug", Price: "9.50", Currency: "EUR"})
	fmt.Println(p.ID == again.ID, mk.ProductsWithRef("pub-1"))

	out, _ := provider.CompleteText(ctx, "task-1", "", "Name a mug")
	fmt.Println(out.Output, out.Usage.PromptTokens > 0)
	// Output:
	// true Sandbox shop shop-1 [REDACTED]
	// true 1
	// Sandbox reply (gpt-4o-mini): Name a mug true
}
