package sns

import (
	"context"
	"net/url"

	"github.com/ferrymq/ferry/transport"
)

func init() { transport.Register(Scheme, URLOpener{}) }

// URLOpener opens sns:// URLs for [transport.Open]: it calls [New] with the
// URL, so that both read it the same way. The zero value is ready to use.
type URLOpener struct{}

var _ transport.Opener = URLOpener{}

// OpenURL returns New(ctx, u.String()).
func (URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	t, err := New(ctx, u.String())
	if err != nil {
		return nil, err
	}
	return t, nil
}
