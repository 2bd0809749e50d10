#include "common/status.h"

#include <gtest/gtest.h>

namespace geodesic {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  GD_ASSIGN_OR_RETURN(int h, Half(x));
  *out = h;
  return Status::Ok();
}

TEST(StatusTest, ValuesAndErrorsPropagate) {
  int out = 0;
  EXPECT_TRUE(UseHalf(4, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = UseHalf(3, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "InvalidArgument: odd");
  EXPECT_EQ(s.Annotate("ctx").message(), "ctx: odd");
  EXPECT_TRUE(Status::Ok().Annotate("ctx").ok());
}

TEST(StatusTest, StatusOrFromOkStatusIsAnError) {
  StatusOr<int> v{Status::Ok()};
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kInternal);
}

}  // namespace
}  // namespace geodesic
