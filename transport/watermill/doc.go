// Package watermill bridges Ferry and Watermill
// (github.com/ThreeDotsLabs/watermill) in both directions.
package watermill
