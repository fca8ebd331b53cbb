// Package event turns Kafka records into events. It is pure logic: no
// database, no Kafka client, no domain.
//
// A Decoder, configured per topic, reads a Record (the consumer's copy of a
// Kafka record) as a CloudEvents 1.0 event in JSON structured mode or Kafka
// binary mode, or as provider JSON mapped by JSON pointers, validates it,
// and derives two things the exactly-once machinery stands on:
//
//   - Event.Key, the dedupe key: the identity of the work, by the topic's key
//     strategy (see StrategyCloudEvents and the others), never an arrival
//     time or an offset;
//   - Event.PayloadHash, over the RFC 8785 canonical form of type, subject,
//     resourceversion and data, so that a redelivery in another transport
//     mode or with a new time is a duplicate and a changed payload under the
//     same key is a conflict.
//
// Every decoding failure is a *DecodeError with a stable Reason, the code the
// record is dead-lettered under. Permanent and IsPermanent classify handler
// errors the same way: permanent errors dead-letter, all others are retried.
package event
