package worker

import (
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// ErrCredentialsUnreadable: a store's sealed credentials cannot be opened or parsed (a
// removed key, or a row copied to another store). Retrying cannot help: the client must
// replace the credentials.
var ErrCredentialsUnreadable = domain.NewError(domain.KindConflict, "CREDENTIALS_UNREADABLE",
	"the store's stored credentials cannot be read; replace them")

// OpenCredentials opens a store's sealed credentials, right before the call that sends them.
// The plaintext lives only in the returned Credentials. A failure is a Permanent
// ErrCredentialsUnreadable whose cause names no secret (cipher and parse errors never quote
// their input).
func OpenCredentials(c port.CredentialCipher, workspaceID, storeID uuid.UUID, sealed port.SealedCredentials) (port.Credentials, error) {
	plain, err := c.Open(sealed.Ciphertext, sealed.KeyID, port.CredentialsAD(workspaceID, storeID))
	if err != nil {
		return port.Credentials{}, Permanent(ErrCredentialsUnreadable.WithCause(err))
	}
	creds, err := port.ParseCredentials(plain)
	clear(plain)
	if err != nil {
		return port.Credentials{}, Permanent(ErrCredentialsUnreadable.WithCause(err))
	}
	return creds, nil
}
