package main

import (
	"fmt"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// FraudThreshold is the order total above which the fraud check runs.
const FraudThreshold = 500

// Header names the checkout sets on OrderPlaced.
const (
	headerType = "type"
	// headerBand is "high" for orders over FraudThreshold, "normal"
	// otherwise: what brokers filter fraud's subscription on.
	headerBand = "amount-band"
)

// OrderPlaced is the event the checkout emits (about 1 KB of JSON).
type OrderPlaced struct {
	Shop     string    `json:"shop"`
	OrderID  string    `json:"order_id"`
	Customer string    `json:"customer"`
	Email    string    `json:"email"`
	Items    []Item    `json:"items"`
	Total    float64   `json:"total"`
	Currency string    `json:"currency"`
	Address  Address   `json:"shipping_address"`
	PlacedAt time.Time `json:"placed_at"`
}

// Item is one order line.
type Item struct {
	SKU      string  `json:"sku"`
	Name     string  `json:"name"`
	Quantity int     `json:"quantity"`
	Price    float64 `json:"unit_price"`
}

// Address is where the order ships.
type Address struct {
	Name, Street, City, Postcode, Country string
}

// units is the stock the order reserves.
func (o OrderPlaced) units() int64 {
	var u int64
	for _, it := range o.Items {
		u += int64(it.Quantity)
	}
	return u
}

// newOrder builds order n of shop's demo; totals are deterministic so the
// summary is too.
func newOrder(shop string, n int) OrderPlaced {
	qty := 1 + n%3
	price := 50 + float64((n*137)%300)
	return OrderPlaced{
		Shop:     shop,
		OrderID:  orderName(n),
		Customer: fmt.Sprintf("customer-%03d", n%50),
		Email:    fmt.Sprintf("customer-%03d@example.com", n%50),
		Items: []Item{
			{SKU: fmt.Sprintf("SKU-%05d", n%97), Name: "Stainless steel water bottle, 750 ml, matte black", Quantity: qty, Price: price},
			{SKU: fmt.Sprintf("SKU-%05d", n%89+100), Name: "Replacement lid with carry loop and silicone seal", Quantity: 1, Price: 9.5},
		},
		Total:    float64(qty)*price + 9.5,
		Currency: "EUR",
		Address:  Address{Name: "A. Customer", Street: "1 Example Street, Flat 2", City: "Utrecht", Postcode: "3511 AB", Country: "NL"},
		PlacedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second),
	}
}

// poisonOrder is order n made undeliverable and out of stock.
func poisonOrder(shop string, n int) OrderPlaced {
	o := newOrder(shop, n)
	o.Email = "undeliverable@invalid"
	o.Items[0].SKU = unavailableSKU
	return o
}

func band(total float64) string {
	if total > FraudThreshold {
		return "high"
	}
	return "normal"
}

// eventID is the business event ID of o's OrderPlaced: the dedupe key,
// unique per shop and order, never the broker's message ID.
func eventID(o OrderPlaced) string { return "evt-" + o.Shop + "-" + o.OrderID }

// orderKey is the ordering key of o's events: one key per order.
func orderKey(o OrderPlaced) string { return o.Shop + "-" + o.OrderID }

// orderOf returns the order number of an event ID or key, or 0.
func orderOf(idOrKey string) int {
	var n int
	if i := len(idOrKey) - 4; i > 0 {
		_, _ = fmt.Sscanf(idOrKey[i:], "%04d", &n)
	}
	return n
}

// placedMessage is the OrderPlaced event of o for topic.
func placedMessage(o OrderPlaced, body []byte, topic string) *handler.Message {
	return &handler.Message{ID: eventID(o), Key: orderKey(o), Topic: topic, Payload: body,
		Headers: map[string]string{headerType: "OrderPlaced", "content-type": "application/json", headerBand: band(o.Total)}}
}

// PaymentWindow is how long an order may stay unpaid: the checkout
// schedules each order's PaymentDue this long after placing it (a delayed
// message), and the payments consumer cancels the order if it is unpaid
// by then.
const PaymentWindow = 2 * time.Second

// unpaidOrder is the order number the demo's customer never pays.
const unpaidOrder = 2

// paymentDueMessage is the delayed PaymentDue of o for topic: its ID is
// the dedupe key of the deadline, its Key the order's.
func paymentDueMessage(o OrderPlaced, topic string) *handler.Message {
	return &handler.Message{ID: "due-" + o.Shop + "-" + o.OrderID, Key: orderKey(o), Topic: topic,
		Payload: []byte(`{"order_id":"` + o.OrderID + `"}`),
		Headers: map[string]string{headerType: "PaymentDue", "content-type": "application/json"}}
}
