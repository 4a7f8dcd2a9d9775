/**
 * @file kvq/kvq.h
 * @brief kvq: durable, transactional queues for C. Include this one header.
 */
#ifndef KVQ_KVQ_H
#define KVQ_KVQ_H

#include "common.h"
#include "error.h"
#include "db.h"
#include "consumer.h"
#include "tuple.h"
#include "queue.h"
#include "workq.h"
#include "workq_batch.h"

#endif /* KVQ_KVQ_H */
