// Losses on logits, computed in plain C++ (they are O(batch) and not worth a primitive).
// Both return the mean loss over the batch and write d(mean loss)/d(logit).
#pragma once

namespace kubetrain::trainer {

// Binary cross-entropy on sigmoid(logit); labels are 0/1. Numerically stable for
// large |logit|.
float SigmoidBinaryCrossEntropy(const float* logits, const float* labels, int n, float* grad);

// Softmax cross-entropy; logits [n x classes], labels hold the class index as float.
float SoftmaxCrossEntropy(const float* logits, const float* labels, int n, int classes,
                          float* grad);

float Sigmoid(float x);

}  // namespace kubetrain::trainer
